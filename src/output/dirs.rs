//! Directories the exporter writes into (`--dump-directory`, `--textfile-directory`), made
//! safe against what another user can plant on the way. The exporter often runs as root and
//! the default dump directory is in world-writable `/tmp`, where anyone can create
//! `/tmp/dcgm-exporter-debug` first, as a link to a directory of theirs' choosing or as a
//! directory they own. So, walking the path one component at a time (`lstat`, never
//! following a link unseen):
//!
//! - every component that is missing is created by us, one `mkdir` at a time, and checked
//!   right after: one that turns out to be a symbolic link (planted between the look and the
//!   `mkdir`, or swapped in after it) is refused, so nothing is ever written through it;
//! - a private directory (the dumps) is created 0700; one that exists already must be a real
//!   directory (not a link), owned by our effective uid, and not writable by group or others
//!   unless its sticky bit is set (then others cannot remove or rename our files in it, and
//!   the files are created exclusively, without following links, under random names); every
//!   directory above it must be owned by root or by us and be just as closed, and a link on
//!   the way must be owned by root or by us (a link another user owns could be pointed
//!   anywhere): the rules OpenSSH applies to `~/.ssh`;
//! - a shared directory (the textfile, which node-exporter reads and which is often its own,
//!   group-writable) is created 0755 and may be anyone's once it exists: what protects the
//!   file in it is its exclusive, no-follow temporary (`textfile.rs`).
//!
//! Errors name the flag and the path at fault.

use crate::output::{DirError, DirWhy};
use crate::runtime::process::effective_uid;
use std::ffi::OsStr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

/// Who else may use a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Ours alone (debug dumps).
    Private,
    /// Read by another program too (node-exporter's textfile directory).
    Shared,
}

impl Kind {
    fn mode(self) -> u32 {
        match self {
            Kind::Private => 0o700,
            Kind::Shared => 0o755,
        }
    }
}

/// The sticky bit and the group- and world-write bits of a mode.
const STICKY: u32 = 0o1000;
const WRITABLE_BY_OTHERS: u32 = 0o022;

/// The path's components below the root, absolute (relative to the working directory).
fn components(dir: &Path) -> Result<Vec<&OsStr>, DirWhy> {
    let mut out = Vec::new();
    for c in dir.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => return Err(DirWhy::ParentComponent),
        }
    }
    if out.is_empty() {
        return Err(DirWhy::NoComponent);
    }
    Ok(out)
}

/// Makes sure `dir` is a directory of `kind` this process may write into without following
/// anything another user planted, creating what is missing (see the module's rules). `flag`
/// names the option in errors. Run at start (an error stops the exporter) and before each
/// round of writes (a directory removed meanwhile is created again, under the same rules).
pub(crate) fn prepare(dir: &Path, kind: Kind, flag: &'static str) -> Result<(), DirError> {
    walk(dir, kind, flag).map(|_| ())
}

/// [`prepare`] of a private directory, then a handle on the very directory that was
/// checked: files are made in it relative to the handle (`openat`), so a path swapped for a
/// link, or for another directory, after the check is never written through. The
/// directory is opened without following a link and must be the one checked (same device
/// and inode).
pub(crate) fn open_private(dir: &Path, flag: &'static str) -> Result<Handle, DirError> {
    use rustix::fs::{Mode, OFlags};
    let err = |why: DirWhy| DirError {
        flag,
        dir: dir.to_path_buf(),
        why,
    };
    let (path, checked) = walk(dir, Kind::Private, flag)?;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::open(&path, flags, Mode::empty()).map_err(|e| {
        err(DirWhy::Open {
            path: path.clone(),
            source: e.into(),
        })
    })?;
    let now = rustix::fs::fstat(&fd).map_err(|e| {
        err(DirWhy::Open {
            path: path.clone(),
            source: e.into(),
        })
    })?;
    if (now.st_dev, now.st_ino) != (checked.dev(), checked.ino()) {
        return Err(err(DirWhy::Replaced(path)));
    }
    Ok(Handle { fd })
}

/// An open directory checked by [`open`].
pub(crate) struct Handle {
    fd: std::os::fd::OwnedFd,
}

impl Handle {
    /// Creates `name` in the directory, new only (never through a link planted under the
    /// name), with `mode`.
    pub(crate) fn create_new(&self, name: &str, mode: u32) -> std::io::Result<std::fs::File> {
        use rustix::fs::{Mode, OFlags};
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode))?;
        Ok(std::fs::File::from(fd))
    }

    /// Removes the file `name` from the directory.
    pub(crate) fn remove(&self, name: &str) -> std::io::Result<()> {
        Ok(rustix::fs::unlinkat(
            &self.fd,
            name,
            rustix::fs::AtFlags::empty(),
        )?)
    }
}

/// The walk of [`prepare`]: the directory's path with the links on the way resolved (a
/// shared directory's are kept as given), and what was checked of it.
fn walk(
    dir: &Path,
    kind: Kind,
    flag: &'static str,
) -> Result<(PathBuf, std::fs::Metadata), DirError> {
    let err = |why: DirWhy| DirError {
        flag,
        dir: dir.to_path_buf(),
        why,
    };
    let uid = effective_uid().map_err(|e| err(DirWhy::Uid(e)))?;
    let names = components(dir).map_err(err)?;
    let start = if dir.is_absolute() {
        PathBuf::from("/")
    } else {
        std::env::current_dir().map_err(|e| err(DirWhy::NoWorkingDirectory(e)))?
    };
    let mut cur = start;
    let mut checked = None;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        let next = cur.join(name);
        let (meta, created) = look_or_create(&next, kind).map_err(err)?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            if created {
                return Err(err(DirWhy::BecameLink(next)));
            }
            let (real, m) = follow(&next, &meta, last, kind, uid).map_err(err)?;
            cur = real;
            checked = Some(m);
            continue;
        }
        if !ft.is_dir() {
            return Err(err(DirWhy::NotDirectory(next)));
        }
        if kind == Kind::Private {
            closed(&next, &meta, last, uid).map_err(err)?;
        }
        cur = next;
        checked = Some(meta);
    }
    // `components` refuses a path without one, so the loop ran.
    let checked = checked.ok_or_else(|| err(DirWhy::NoComponent))?;
    Ok((cur, checked))
}

/// `lstat` of `path`, creating it (mode of `kind`) when it is missing; whether we created it.
fn look_or_create(path: &Path, kind: Kind) -> Result<(std::fs::Metadata, bool), DirWhy> {
    let stat = |source| DirWhy::Stat {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) => return Ok((m, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(stat(e)),
    }
    let created = match std::fs::DirBuilder::new().mode(kind.mode()).create(path) {
        Ok(()) => true,
        // Something appeared meanwhile: judged as what it is now, below.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(source) => {
            return Err(DirWhy::Create {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let m = std::fs::symlink_metadata(path).map_err(stat)?;
    if !created && m.file_type().is_symlink() {
        return Err(DirWhy::AppearedAsLink(path.to_path_buf()));
    }
    Ok((m, created))
}

/// Where an existing link on the way leads, if it may be followed, and what is there.
fn follow(
    link: &Path,
    meta: &std::fs::Metadata,
    last: bool,
    kind: Kind,
    uid: u32,
) -> Result<(PathBuf, std::fs::Metadata), DirWhy> {
    if kind == Kind::Shared {
        // The operator's layout (a hostPath, a link to node-exporter's directory): followed.
        return Ok((link.to_path_buf(), meta.clone()));
    }
    let target = std::fs::read_link(link)
        .map(|t| t.display().to_string())
        .unwrap_or_default();
    if last {
        return Err(DirWhy::IsLink {
            link: link.to_path_buf(),
            target,
        });
    }
    if meta.uid() != 0 && meta.uid() != uid {
        return Err(DirWhy::ForeignLink {
            link: link.to_path_buf(),
            target,
            owner: meta.uid(),
        });
    }
    let real = std::fs::canonicalize(link).map_err(|source| DirWhy::Stat {
        path: link.to_path_buf(),
        source,
    })?;
    let m = std::fs::metadata(&real).map_err(|source| DirWhy::Stat {
        path: real.clone(),
        source,
    })?;
    if !m.is_dir() {
        return Err(DirWhy::NotDirectory(link.to_path_buf()));
    }
    closed(&real, &m, false, uid)?;
    Ok((real, m))
}

/// The ownership and mode rules of a private directory (`last`) or one above it.
fn closed(path: &Path, meta: &std::fs::Metadata, last: bool, uid: u32) -> Result<(), DirWhy> {
    let owner = meta.uid();
    if last && owner != uid {
        return Err(DirWhy::NotOurs {
            path: path.to_path_buf(),
            owner,
            uid,
        });
    }
    if !last && owner != 0 && owner != uid {
        return Err(DirWhy::ForeignAbove {
            path: path.to_path_buf(),
            owner,
        });
    }
    let mode = meta.mode();
    if mode & WRITABLE_BY_OTHERS != 0 && mode & STICKY == 0 {
        return Err(DirWhy::OpenToOthers {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn missing_components_are_created_0700_for_private_and_0755_for_shared() {
        let base = tempfile::tempdir().unwrap();
        let private = base.path().join("a/b/dumps");
        prepare(&private, Kind::Private, "--dump-directory").unwrap();
        for p in [
            base.path().join("a"),
            base.path().join("a/b"),
            private.clone(),
        ] {
            assert_eq!(mode(&p), 0o700, "{}", p.display());
        }
        // Again: an existing directory of ours passes.
        prepare(&private, Kind::Private, "--dump-directory").unwrap();
        let shared = base.path().join("c/text");
        prepare(&shared, Kind::Shared, "--textfile-directory").unwrap();
        // The umask may take bits away, never add them.
        assert_eq!(mode(&shared) & !0o755, 0);
        assert!(shared.is_dir());
    }

    #[test]
    fn a_link_as_the_private_directory_is_refused_and_nothing_is_made_behind_it() {
        let base = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        let link = base.path().join("dumps");
        std::os::unix::fs::symlink(target.path(), &link).unwrap();
        let e = prepare(&link, Kind::Private, "--dump-directory").unwrap_err();
        assert_eq!(
            (e.flag, e.dir.as_path()),
            ("--dump-directory", link.as_path())
        );
        assert!(
            matches!(&e.why, DirWhy::IsLink { link: l, .. } if l == &link),
            "{e}"
        );
        // Below a link: the link is followed only when root or we own it (we do here), and
        // the component under it is created in the link's target.
        let below = link.join("sub");
        prepare(&below, Kind::Private, "--dump-directory").unwrap();
        assert!(target.path().join("sub").is_dir());
        // A shared directory may be reached through the operator's link.
        prepare(&link, Kind::Shared, "--textfile-directory").unwrap();
    }

    #[test]
    fn open_or_foreign_directories_are_refused_for_dumps() {
        let base = tempfile::tempdir().unwrap();
        let open = base.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare(&open, Kind::Private, "--dump-directory").unwrap_err();
        assert!(
            matches!(&e.why, DirWhy::OpenToOthers { path, mode: 0o777 } if path == &open),
            "{e}"
        );
        // The operator reads the mode as `ls` shows it.
        assert!(e.to_string().contains("(mode 777)"), "{e}");
        // As the directory above: someone could swap what we create under it.
        let e = prepare(&open.join("d"), Kind::Private, "--dump-directory").unwrap_err();
        assert!(
            matches!(&e.why, DirWhy::OpenToOthers { path, .. } if path == &open),
            "{e}"
        );
        assert!(!open.join("d").exists(), "created under an open directory");
        // With the sticky bit (as /tmp), others cannot touch what is ours in it.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        prepare(&open, Kind::Private, "--dump-directory").unwrap();
        // The shared kind leaves an existing directory's mode alone.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        prepare(&open, Kind::Shared, "--textfile-directory").unwrap();
        assert!(matches!(
            components(Path::new("/a/../b")),
            Err(DirWhy::ParentComponent)
        ));
        let file = base.path().join("file");
        std::fs::write(&file, "").unwrap();
        let e = prepare(&file, Kind::Shared, "--textfile-directory").unwrap_err();
        assert!(
            matches!(&e.why, DirWhy::NotDirectory(p) if p == &file),
            "{e}"
        );
    }
}
