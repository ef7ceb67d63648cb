//! HTTP endpoints: `/metrics` serves the last published page plus self-metrics, `/health`
//! reports DCGM connectivity and freshness, `/` is a landing page.

use crate::app::Shared;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use warp::http::{Response, StatusCode};
use warp::Filter;

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const LANDING: &str = "<html>\n<head><title>GPU Exporter</title></head>\n<body>\n<h1>GPU Exporter</h1>\n\
<p><a href=\"./metrics\">Metrics</a></p>\n<p><a href=\"./health\">Health</a></p>\n</body>\n</html>\n";

/// Resolves dcgm-exporter's `-a` value: `:9400` (all interfaces), `host:port`, `[v6]:port`.
pub fn listen_addrs(addr: &str) -> Result<Vec<SocketAddr>, String> {
    if let Some(port) = addr.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("-a {addr}: invalid port '{port}'"))?;
        // Go's ":port" listens on every interface, IPv6 included.
        return Ok(vec![
            SocketAddr::from(([0u16; 8], port)),
            SocketAddr::from(([0u8; 4], port)),
        ]);
    }
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| format!("-a {addr}: {e} (expected :port, host:port or [ipv6]:port)"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("-a {addr}: resolves to no address"));
    }
    Ok(addrs)
}

pub fn routes(
    shared: Arc<Shared>,
) -> impl Filter<Extract = (impl warp::Reply,), Error = warp::Rejection> + Clone {
    let s1 = shared.clone();
    let metrics = warp::path("metrics")
        .and(warp::path::end())
        .and(warp::get())
        .map(move || {
            let page = s1.page();
            let own = s1.metrics.encode();
            let mut body = Vec::with_capacity(page.len() + own.len());
            body.extend_from_slice(&page);
            body.extend_from_slice(&own);
            Response::builder()
                .header("Content-Type", CONTENT_TYPE)
                .header("X-Content-Type-Options", "nosniff")
                .body(body)
                .unwrap_or_default()
        });
    let s2 = shared;
    let health = warp::path("health")
        .and(warp::path::end())
        .and(warp::get())
        .map(move || match s2.health() {
            Ok(()) => Response::builder()
                .status(StatusCode::OK)
                .body(
                    std::iter::once("OK".to_string())
                        .chain(s2.notes().into_iter().map(|n| format!("degraded: {n}")))
                        .collect::<Vec<_>>()
                        .join("\n"),
                )
                .unwrap_or_default(),
            Err(why) => Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .body(format!("unhealthy: {why}"))
                .unwrap_or_default(),
        });
    let index = warp::path::end()
        .and(warp::get())
        .map(|| warp::reply::html(LANDING));
    metrics.or(health).or(index)
}

#[cfg(test)]
mod tests {
    use super::listen_addrs;

    #[test]
    fn go_style_listen_addresses() {
        assert_eq!(listen_addrs(":9400").unwrap().len(), 2);
        assert_eq!(listen_addrs("127.0.0.1:9500").unwrap()[0].port(), 9500);
        assert!(listen_addrs("[::1]:9401").unwrap()[0].is_ipv6());
        assert!(listen_addrs(":http").unwrap_err().contains("-a"));
        assert!(listen_addrs("nohost").is_err());
    }
}
