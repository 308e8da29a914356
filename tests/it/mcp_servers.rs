//! npm's reference MCP servers for the tests (`tests/mcp-servers`, installed by `cargo xtask
//! test`): server-everything over streamable HTTP on loopback behind a proxy that demands a
//! bearer credential. Without them the tests print SKIP, unless `TANDEM_TEST_REQUIRE_MCP=1`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;

/// The credential the gateway must add and the workspace must never see.
pub const SECRET: &str = "mcp-credential-7f3a9c2e51d04b8e";

/// npm's reference MCP servers, if installed.
pub fn servers_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/mcp-servers/node_modules/@modelcontextprotocol");
    if dir.join("server-everything/dist/index.js").exists() {
        return Some(dir);
    }
    if std::env::var("TANDEM_TEST_REQUIRE_MCP").is_ok_and(|v| v == "1") {
        panic!("the MCP servers are not installed: run `cargo xtask deps --test`");
    }
    eprintln!("SKIP: the MCP servers are not installed (tests/mcp-servers)");
    None
}

/// server-everything on a loopback port behind a proxy that refuses any request without the
/// bearer credential, recording what each request carried.
pub struct Everything {
    _node: tokio::process::Child,
    pub url: String,
    authorizations: Arc<Mutex<Vec<Option<String>>>>,
}

impl Everything {
    pub async fn start(dir: &std::path::Path) -> Self {
        everything(dir).await
    }

    /// The `Authorization` header of every request that reached the proxy.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.authorizations.lock().unwrap().clone()
    }
}

async fn everything(dir: &std::path::Path) -> Everything {
    use tokio::io::AsyncBufReadExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut node = tokio::process::Command::new("node")
        .arg(dir.join("server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let mut lines = tokio::io::BufReader::new(node.stderr.take().unwrap()).lines();
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("listening") {
                return;
            }
        }
        panic!("server-everything ended before it listened");
    })
    .await
    .expect("server-everything listens within a minute");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let authorizations: Arc<Mutex<Vec<Option<String>>>> = Default::default();
    let seen = authorizations.clone();
    let upstream = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let proxy = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let (seen, upstream, http) = (seen.clone(), upstream.clone(), http.clone());
        async move {
            use axum::response::IntoResponse;
            let auth = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(String::from);
            seen.lock().unwrap().push(auth.clone());
            if auth.as_deref() != Some(&format!("Bearer {SECRET}")) {
                return (StatusCode::UNAUTHORIZED, "no credential").into_response();
            }
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, 16 << 20).await.unwrap();
            let mut out = http.request(parts.method, format!("{upstream}{}", parts.uri));
            for (k, v) in &parts.headers {
                if k != "host" && k != "authorization" {
                    out = out.header(k, v);
                }
            }
            let res = out.body(body).send().await.unwrap();
            let mut answer = axum::response::Response::builder().status(res.status().as_u16());
            for (k, v) in res.headers() {
                answer = answer.header(k.as_str(), v.as_bytes());
            }
            answer
                .body(axum::body::Body::from_stream(res.bytes_stream()))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, proxy).await });
    Everything {
        _node: node,
        url,
        authorizations,
    }
}
