//! HTTP basic auth against exporter-toolkit's `basic_auth_users` (bcrypt hashes). bcrypt is
//! slow by design, so checks run off the async threads and results are cached per
//! (user, password), as exporter-toolkit does; unknown users cost a bcrypt check too, so
//! timing does not tell which user names exist.

use base64::Engine;
use hyper::header::HeaderValue;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// A cost-10 hash checked for unknown users (its password does not matter: they are refused).
fn dummy_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| bcrypt::hash("unknown user", 10).unwrap_or_default())
}

const CACHE_LIMIT: usize = 1024;

pub struct BasicAuth {
    users: BTreeMap<String, String>,
    cache: Mutex<HashMap<(String, String), bool>>,
}

impl BasicAuth {
    pub fn new(users: BTreeMap<String, String>) -> BasicAuth {
        BasicAuth {
            users,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the `Authorization` header carries a known user and the right password.
    pub async fn allows(self: &Arc<Self>, header: Option<&HeaderValue>) -> bool {
        let Some((user, pass)) = header.and_then(credentials) else {
            return false;
        };
        let key = (user, pass);
        if let Some(&ok) = self.cache().get(&key) {
            return ok;
        }
        let me = self.clone();
        let (user, pass) = key.clone();
        let ok = tokio::task::spawn_blocking(move || {
            let (hash, known) = match me.users.get(&user) {
                Some(h) => (h.as_str(), true),
                None => (dummy_hash(), false),
            };
            known && bcrypt::verify(pass.as_bytes(), hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        let mut cache = self.cache();
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(key, ok);
        ok
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), bool>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `Basic base64(user:password)` -> (user, password).
fn credentials(h: &HeaderValue) -> Option<(String, String)> {
    let s = h.to_str().ok()?;
    let (scheme, b64) = s.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// From `htpasswd -nBC 10 alice` with the password "password".
    const ALICE: &str = "$2y$10$CWCEbs7mt8QFrToJR9OcG.tduEKpx9SROhWnaDHQgQX4Q6hqWNASa";

    fn header(user_pass: &str) -> HeaderValue {
        let b = base64::engine::general_purpose::STANDARD.encode(user_pass);
        HeaderValue::from_str(&format!("Basic {b}")).unwrap()
    }

    #[tokio::test]
    async fn right_wrong_unknown_and_malformed() {
        let auth = Arc::new(BasicAuth::new(BTreeMap::from([(
            "alice".to_string(),
            ALICE.to_string(),
        )])));
        assert!(auth.allows(Some(&header("alice:password"))).await);
        // Cached answers stay the same.
        assert!(auth.allows(Some(&header("alice:password"))).await);
        assert!(!auth.allows(Some(&header("alice:Password"))).await);
        assert!(!auth.allows(Some(&header("bob:password"))).await);
        assert!(!auth.allows(Some(&header("alice"))).await);
        assert!(!auth.allows(None).await);
        assert!(
            !auth
                .allows(Some(&HeaderValue::from_static("Bearer abc")))
                .await
        );
    }

    #[test]
    fn the_dummy_hash_costs_what_a_real_one_does() {
        let parts: bcrypt::HashParts = dummy_hash().parse().unwrap();
        assert_eq!(parts.get_cost(), 10);
    }
}
