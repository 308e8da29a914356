//! The workspace's own files as a tar layer ([`agent::routes::LAYER`]), for a runtime that
//! cannot keep a stopped workspace's writable layer (a pod): each of [`agent::KEPT_DIRS`]
//! whole, marked opaque so that, laid over the image it started from, it replaces that
//! directory (files deleted here stay deleted). Links are stored as links; sockets, fifos and
//! devices are left out.

use std::io::Write;
use std::path::Path;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tandem_protocol::agent;

/// The layer, streamed as it is written.
pub async fn serve() -> Response {
    let (reader, writer) = tokio::io::duplex(1 << 20);
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _entered = handle.enter();
        let out = tokio_util::io::SyncIoBridge::new(writer);
        // A failure cuts the stream short: the tar's end is missing, and the server refuses it.
        if let Err(e) = write(out, &agent::KEPT_DIRS) {
            eprintln!("tandem-workspace-agent: packing the layer: {e}");
        }
    });
    (
        StatusCode::OK,
        [("content-type", "application/x-tar")],
        Body::from_stream(tokio_util::io::ReaderStream::with_capacity(reader, 1 << 20)),
    )
        .into_response()
}

/// Writes `dirs` (absolute) as a layer into `out`.
pub fn write(out: impl Write, dirs: &[&str]) -> std::io::Result<()> {
    let mut tar = tar::Builder::new(out);
    tar.follow_symlinks(false);
    for dir in dirs {
        let path = Path::new(dir);
        let name = dir.trim_start_matches('/');
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => {
                tar.append_path_with_name(path, name)?;
                let mut marker = tar::Header::new_ustar();
                marker.set_entry_type(tar::EntryType::Regular);
                marker.set_size(0);
                marker.set_mode(0o644);
                tar.append_data(
                    &mut marker,
                    format!("{name}/.wh..wh..opq"),
                    std::io::empty(),
                )?;
                walk(&mut tar, path, name)?;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    tar.into_inner()?.flush()
}

fn walk<W: Write>(tar: &mut tar::Builder<W>, dir: &Path, name: &str) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            // A name tar's paths cannot carry as text is kept as bytes by tar itself.
            let path = entry.path();
            let rel = Path::new(name).join(entry.file_name());
            tar.append_path_with_name(&path, &rel)?;
            continue;
        };
        let path = entry.path();
        let rel = format!("{name}/{file_name}");
        let kind = entry.file_type()?;
        if kind.is_dir() {
            tar.append_path_with_name(&path, &rel)?;
            walk(tar, &path, &rel)?;
        } else if kind.is_file() || kind.is_symlink() {
            tar.append_path_with_name(&path, &rel)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_holds_the_dirs_with_an_opaque_marker_links_as_links_and_no_sockets() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("workspace");
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", dir.join("link")).unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(dir.join("sock")).unwrap();
        let mut out = Vec::new();
        write(&mut out, &[dir.to_str().unwrap(), "/nonexistent-dir"]).unwrap();
        let mut archive = tar::Archive::new(&out[..]);
        let prefix = dir.to_str().unwrap().trim_start_matches('/');
        let mut seen = Vec::new();
        for e in archive.entries().unwrap() {
            let e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let rel = path.strip_prefix(prefix).unwrap().to_string();
            if rel == "/link" {
                assert_eq!(e.header().entry_type(), tar::EntryType::Symlink);
                assert_eq!(
                    e.link_name().unwrap().unwrap().to_str(),
                    Some("/etc/shadow"),
                    "the link is stored, not what it points at"
                );
            }
            seen.push(rel);
        }
        assert_eq!(
            seen,
            ["", "/.wh..wh..opq", "/link", "/src", "/src/main.rs"],
            "the dir, its marker, its files; no socket"
        );
    }
}
