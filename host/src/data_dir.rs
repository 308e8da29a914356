//! What the server keeps at the top of its data dir: its id (`server-id`) and its keys
//! (`agent.key`, `secrets.key`, `jwt.key`), each made once, durably, by whichever process comes
//! first, and read by every later one.

use std::io::Write;
use std::path::Path;

use crate::{Error, Result};

/// The agent key's file: per-workspace agent tokens and gateway secrets are HMACs under it.
pub const AGENT_KEY: &str = "agent.key";
/// The secret store's key file.
pub const SECRETS_KEY: &str = "secrets.key";
/// The browser logins' signing key file (shared by the servers of a cluster).
pub const JWT_KEY: &str = "jwt.key";
/// Smallest key accepted.
pub const MIN_KEY_BYTES: usize = 32;

/// The key in `path`: at least [`MIN_KEY_BYTES`] bytes, made of fresh random bytes (mode 0600,
/// synced with its directory) if the file is missing. A shorter file is an error, never
/// replaced: a key that changed would sign nothing already issued.
pub fn load_or_create_key(path: &Path) -> Result<Vec<u8>> {
    match std::fs::read(path) {
        Ok(k) if k.len() >= MIN_KEY_BYTES => return Ok(k),
        Ok(_) => {
            return Err(Error::Config(format!(
                "{} is shorter than {MIN_KEY_BYTES} bytes: restore it from a backup (or delete it to start over, which signs out everyone and loses what it sealed)",
                path.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::Config(format!("{}: {e}", path.display()))),
    }
    let mut key = vec![0u8; MIN_KEY_BYTES];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut key);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    match opts.open(path) {
        Ok(mut f) => {
            f.write_all(&key)?;
            f.sync_all()?;
            if let Some(dir) = path.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(key)
        }
        // Another process made it first: theirs it is.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => load_or_create_key(path),
        Err(e) => Err(e.into()),
    }
}

/// The workspace agents' key: 32 random bytes in `<data dir>/agent.key`, made on first use.
pub fn agent_key(data_dir: &Path) -> Result<Vec<u8>> {
    load_or_create_key(&data_dir.join(AGENT_KEY))
}

/// This server's id, kept in `<data dir>/server-id` (made on first use): it names the turns it
/// runs and the host of the workspaces it starts. Processes sharing a data dir share it.
pub fn server_id(data_dir: &Path) -> Result<String> {
    let path = data_dir.join("server-id");
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        _ => {
            let id = uuid::Uuid::new_v4().to_string();
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create_new(true);
            match opts.open(&path) {
                Ok(mut f) => {
                    f.write_all(id.as_bytes())?;
                    f.sync_all()?;
                    Ok(id)
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let s = std::fs::read_to_string(&path)?;
                    if s.trim().is_empty() {
                        // Left empty (a crash between create and write): made again.
                        std::fs::write(&path, &id)?;
                        return Ok(id);
                    }
                    Ok(s.trim().to_string())
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_and_a_short_one_is_refused_not_replaced() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join(AGENT_KEY);
        let k = load_or_create_key(&p).unwrap();
        assert_eq!(k.len(), MIN_KEY_BYTES);
        assert_eq!(load_or_create_key(&p).unwrap(), k, "read back, not remade");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::write(&p, b"short").unwrap();
        let e = load_or_create_key(&p).unwrap_err();
        assert!(e.to_string().contains("shorter"), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), b"short", "never replaced");
    }

    #[test]
    fn the_server_id_is_made_once() {
        let t = tempfile::tempdir().unwrap();
        let a = server_id(t.path()).unwrap();
        assert_eq!(server_id(t.path()).unwrap(), a);
    }
}
