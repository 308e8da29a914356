//! The Chrome extension's package, made for one server: the files of `extension/` (compiled
//! in), a manifest whose host permissions name this server and the pages its URL rules name
//! (or every site, `[extension] all_sites`), and a `config.json` that fills in the server's
//! address. As a zip (`/extension/tandem.zip`: load unpacked, or upload to a store) and as a
//! CRX3 signed with the server's own key (`/extension/tandem.crx`), which an update manifest
//! (`/extension/updates.xml`) offers to `ExtensionInstallForcelist`.

use std::io::Write;

use serde_json::{Value, json};

use crate::{Error, Result};

/// Every file of the extension, by its path in the package.
pub const FILES: &[(&str, &[u8])] = &[
    (
        "manifest.json",
        include_bytes!("../../extension/manifest.json"),
    ),
    (
        "background.js",
        include_bytes!("../../extension/background.js"),
    ),
    (
        "console-hook.js",
        include_bytes!("../../extension/console-hook.js"),
    ),
    ("picker.js", include_bytes!("../../extension/picker.js")),
    ("panel.html", include_bytes!("../../extension/panel.html")),
    ("panel.css", include_bytes!("../../extension/panel.css")),
    ("panel.js", include_bytes!("../../extension/panel.js")),
    ("api.js", include_bytes!("../../extension/api.js")),
    ("pick.js", include_bytes!("../../extension/pick.js")),
    ("timeline.js", include_bytes!("../../extension/timeline.js")),
    (
        "approvals.js",
        include_bytes!("../../extension/approvals.js"),
    ),
    ("spend.js", include_bytes!("../../extension/spend.js")),
    ("connect.js", include_bytes!("../../extension/connect.js")),
    ("context.js", include_bytes!("../../extension/context.js")),
    ("dom.js", include_bytes!("../../extension/dom.js")),
    ("main.js", include_bytes!("../../extension/main.js")),
    ("notice.js", include_bytes!("../../extension/notice.js")),
    ("rules.js", include_bytes!("../../extension/rules.js")),
    (
        "screenshot.js",
        include_bytes!("../../extension/screenshot.js"),
    ),
    ("session.js", include_bytes!("../../extension/session.js")),
    ("store.js", include_bytes!("../../extension/store.js")),
    ("tabs.js", include_bytes!("../../extension/tabs.js")),
    ("views.js", include_bytes!("../../extension/views.js")),
];

/// What the package is made for.
#[derive(Clone, Debug)]
pub struct Target {
    /// The server's public URL (`http(s)://host[:port]`).
    pub server_url: String,
    /// URL-rule patterns whose origins it may read without a click (`https://app.acme.com/*`).
    pub page_patterns: Vec<String>,
    /// Every site (`<all_urls>`).
    pub all_sites: bool,
    /// The extension's version.
    pub version: String,
}

/// The host permission a URL pattern needs (`scheme://host[:port]/*`), if Chrome can say it:
/// a host is literal or starts with `*.`.
pub fn origin_pattern(pattern: &str) -> Option<String> {
    let (scheme, rest) = pattern.split_once("://")?;
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    let host = rest.split('/').next()?;
    let bare = host.strip_prefix("*.").unwrap_or(host);
    if bare.is_empty() || bare.contains('*') || bare.contains('@') {
        return None;
    }
    Some(format!("{scheme}://{host}/*"))
}

/// The manifest for `t`.
pub fn manifest(t: &Target) -> Result<Value> {
    let (_, base) = FILES[0];
    let mut m: Value = serde_json::from_slice(base)
        .map_err(|e| Error::Internal(format!("extension/manifest.json: {e}")))?;
    let server = url::Url::parse(&t.server_url)
        .map_err(|e| Error::Invalid(format!("the server URL does not parse: {e}")))?;
    let mut hosts = vec![format!(
        "{}://{}/*",
        server.scheme(),
        server.host_str().unwrap_or("localhost")
    )];
    // A match pattern with a port names only that port.
    if let Some(port) = server.port() {
        hosts[0] = format!(
            "{}://{}:{port}/*",
            server.scheme(),
            server.host_str().unwrap_or("localhost")
        );
    }
    if t.all_sites {
        hosts.push("<all_urls>".into());
    } else {
        for p in &t.page_patterns {
            if let Some(o) = origin_pattern(p)
                && !hosts.contains(&o)
            {
                hosts.push(o);
            }
        }
    }
    m["host_permissions"] = json!(hosts);
    m["version"] = json!(t.version);
    Ok(m)
}

/// The package's files for `t`: the extension's, its manifest and `config.json`.
pub fn files(t: &Target) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = vec![(
        "manifest.json".to_string(),
        serde_json::to_vec_pretty(&manifest(t)?).expect("a manifest serializes"),
    )];
    out.extend(
        FILES[1..]
            .iter()
            .map(|(name, body)| (name.to_string(), body.to_vec())),
    );
    out.push((
        "config.json".into(),
        serde_json::to_vec_pretty(&json!({ "server_url": t.server_url.trim_end_matches('/') }))
            .expect("config serializes"),
    ));
    Ok(out)
}

/// The package as a zip.
pub fn zip(t: &Target) -> Result<Vec<u8>> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .unix_permissions(0o644);
    for (name, body) in files(t)? {
        w.start_file(name, options)
            .map_err(|e| Error::Internal(format!("zipping the extension: {e}")))?;
        w.write_all(&body)
            .map_err(|e| Error::Internal(format!("zipping the extension: {e}")))?;
    }
    let cursor = w
        .finish()
        .map_err(|e| Error::Internal(format!("zipping the extension: {e}")))?;
    Ok(cursor.into_inner())
}

/// Writes the unpacked package into `dir` (made if missing).
pub fn write_dir(t: &Target, dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Internal(format!("making {}: {e}", dir.display())))?;
    for (name, body) in files(t)? {
        std::fs::write(dir.join(&name), body)
            .map_err(|e| Error::Internal(format!("writing {name}: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_extension_is_packaged() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../extension");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut packaged: Vec<String> = FILES.iter().map(|(n, _)| n.to_string()).collect();
        packaged.sort();
        assert_eq!(on_disk, packaged, "extension/ and FILES differ");
    }

    #[test]
    fn the_manifest_names_this_server_and_the_rules_pages_only() {
        let t = Target {
            server_url: "https://tandem.acme.com".into(),
            page_patterns: vec![
                "https://app.acme.com/orders/*".into(),
                "https://*.staging.acme.com/*".into(),
                "https://a*b.com/*".into(),
            ],
            all_sites: false,
            version: "1.2.3".into(),
        };
        let m = manifest(&t).unwrap();
        assert_eq!(
            m["host_permissions"],
            json!([
                "https://tandem.acme.com/*",
                "https://app.acme.com/*",
                "https://*.staging.acme.com/*"
            ])
        );
        assert_eq!(m["version"], "1.2.3");
        assert_eq!(m["manifest_version"], 3);
        let perms: Vec<&str> = m["permissions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert_eq!(perms, ["sidePanel", "activeTab", "scripting", "storage"]);
        let t = Target {
            server_url: "http://127.0.0.1:8080/".into(),
            all_sites: true,
            ..t
        };
        assert_eq!(
            manifest(&t).unwrap()["host_permissions"],
            json!(["http://127.0.0.1:8080/*", "<all_urls>"])
        );
    }
}
