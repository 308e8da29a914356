//! A real OpenID provider for tests: npm's `oidc-provider` (OpenID Certified), started from
//! `tests/oidc-provider/server.js` on loopback, behind a small forwarding proxy that owns the
//! issuer URL. The proxy passes everything through unchanged, unless a test asks it to tamper
//! with the next ID token the token endpoint answers (re-signed with the provider's own key, so
//! only the claim under test is wrong).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;

pub const CLIENT_ID: &str = "tandem-test";
pub const CLIENT_SECRET: &str = "tandem-test-secret";

/// What to do to the next ID token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tamper {
    None,
    /// Another issuer, signed with the provider's key.
    Issuer,
    /// Expired ten minutes ago, signed with the provider's key.
    Expired,
    /// Another nonce, signed with the provider's key.
    Nonce,
    /// The signature's bytes changed.
    Signature,
}

#[derive(Clone)]
struct Proxy {
    upstream: Arc<Mutex<u16>>,
    tamper: Arc<Mutex<Tamper>>,
    key_file: PathBuf,
    kid: Arc<Mutex<String>>,
    http: reqwest::Client,
}

/// The provider and its proxy. Dropping it stops the provider (`kill_on_drop`).
pub struct TestIdp {
    /// `http://127.0.0.1:PORT`: the issuer (the proxy).
    pub issuer: String,
    proxy: Proxy,
    child: Option<tokio::process::Child>,
    dir: tempfile::TempDir,
    redirect: String,
}

/// Where `server.js` and its `node_modules` are; `None` (with the reason printed) when the
/// packages are not installed and not required.
pub fn provider_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/oidc-provider"
    ));
    if dir
        .join("node_modules/oidc-provider/package.json")
        .is_file()
    {
        return Some(dir);
    }
    assert!(
        std::env::var("TANDEM_TEST_REQUIRE_WORKSPACES").is_err(),
        "oidc-provider is not installed in {} (cargo xtask test installs it)",
        dir.display()
    );
    eprintln!("SKIP: oidc-provider is not installed (npm ci in tests/oidc-provider)");
    None
}

impl TestIdp {
    /// Binds the proxy (the issuer URL is known before Tandem starts); the provider starts with
    /// [`TestIdp::launch`].
    pub async fn bind() -> Option<Self> {
        provider_dir()?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let proxy = Proxy {
            upstream: Arc::new(Mutex::new(0)),
            tamper: Arc::new(Mutex::new(Tamper::None)),
            key_file: dir.path().join("key.pem"),
            kid: Arc::new(Mutex::new("test-key-1".into())),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(std::time::Duration::from_secs(20))
                .build()
                .unwrap(),
        };
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(proxy.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Some(Self {
            issuer,
            proxy,
            child: None,
            dir,
            redirect: String::new(),
        })
    }

    /// Starts the provider with its one client redirecting to `redirect`.
    pub async fn launch(&mut self, redirect: &str) {
        self.redirect = redirect.to_string();
        self.start_with_kid("test-key-1").await;
    }

    /// Restarts the provider with a new signing key (id `kid`): a key rotation.
    pub async fn rotate(&mut self, kid: &str) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
        self.start_with_kid(kid).await;
    }

    async fn start_with_kid(&mut self, kid: &str) {
        use tokio::io::AsyncBufReadExt;
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let log = self.dir.path().join(format!("{kid}.log"));
        let mut child = tokio::process::Command::new("node")
            .arg("server.js")
            .current_dir(provider_dir().expect("installed"))
            .env("OIDC_PORT", port.to_string())
            .env("OIDC_ISSUER", &self.issuer)
            .env("OIDC_CLIENT_ID", CLIENT_ID)
            .env("OIDC_CLIENT_SECRET", CLIENT_SECRET)
            .env("OIDC_REDIRECT_URI", &self.redirect)
            .env("OIDC_KEY_FILE", &self.proxy.key_file)
            .env("OIDC_KID", kid)
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        // Kept before waiting: dropped (a failed test), it is killed.
        self.child = Some(child);
        // Waits for the one line it prints once it listens (an event, not a sleep).
        let line = tokio::time::timeout(std::time::Duration::from_secs(120), lines.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "oidc-provider did not say it listens within two minutes; its log: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
            .unwrap()
            .unwrap_or_default();
        assert!(
            line.starts_with("oidc-provider listening"),
            "oidc-provider did not start: {line:?}; its log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        *self.proxy.upstream.lock().unwrap() = port;
        *self.proxy.kid.lock().unwrap() = kid.to_string();
    }

    /// Tampers with the next ID token the token endpoint answers.
    pub fn tamper(&self, t: Tamper) {
        *self.proxy.tamper.lock().unwrap() = t;
    }
}

async fn forward(State(p): State<Proxy>, req: Request) -> Response {
    let port = *p.upstream.lock().unwrap();
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str().to_string())
        .unwrap_or_default();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let mut out = p.http.request(
        parts.method.clone(),
        format!("http://127.0.0.1:{port}{path}"),
    );
    for (k, v) in parts.headers.iter() {
        if k != axum::http::header::HOST && k != axum::http::header::CONTENT_LENGTH {
            out = out.header(k, v);
        }
    }
    let res = out.body(body).send().await.expect("provider answers");
    let status = res.status();
    let headers = res.headers().clone();
    let mut bytes = res.bytes().await.unwrap().to_vec();
    let tamper = std::mem::replace(&mut *p.tamper.lock().unwrap(), Tamper::None);
    if parts.uri.path() == "/token" && status.is_success() && tamper != Tamper::None {
        let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let token = v["id_token"].as_str().unwrap().to_string();
        v["id_token"] = serde_json::Value::String(tampered(&p, &token, tamper));
        bytes = serde_json::to_vec(&v).unwrap();
    } else if tamper != Tamper::None {
        // Not the token answer: keep the request for it.
        *p.tamper.lock().unwrap() = tamper;
    }
    let mut res = Response::builder().status(status);
    for (k, v) in headers.iter() {
        if k != axum::http::header::CONTENT_LENGTH && k != axum::http::header::TRANSFER_ENCODING {
            res = res.header(k, v);
        }
    }
    res.body(Body::from(bytes)).unwrap()
}

fn tampered(p: &Proxy, token: &str, t: Tamper) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut parts = token.split('.');
    let (_header, payload, sig) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    if t == Tamper::Signature {
        let mut raw = b64.decode(sig).unwrap();
        raw[10] ^= 0xff;
        return format!("{_header}.{payload}.{}", b64.encode(raw));
    }
    let mut claims: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&b64.decode(payload).unwrap()).unwrap();
    let now = tandem_server::now_ms() / 1000;
    match t {
        Tamper::Issuer => {
            claims.insert("iss".into(), "http://127.0.0.1:1".into());
        }
        Tamper::Expired => {
            claims.insert("iat".into(), (now - 1200).into());
            claims.insert("exp".into(), (now - 600).into());
        }
        Tamper::Nonce => {
            claims.insert("nonce".into(), "not-the-nonce-tandem-sent".into());
        }
        Tamper::None | Tamper::Signature => {}
    }
    let pem = std::fs::read(&p.key_file).unwrap();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(p.kid.lock().unwrap().clone());
    jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap(),
    )
    .unwrap()
}

/// A browser's cookies, by name (enough for one provider on one host).
#[derive(Default)]
pub struct Jar(BTreeMap<String, String>);

impl Jar {
    pub fn take(&mut self, res: &reqwest::Response) {
        for v in res.headers().get_all(reqwest::header::SET_COOKIE) {
            let Some((kv, _)) = v
                .to_str()
                .unwrap()
                .split_once(';')
                .or(Some((v.to_str().unwrap(), "")))
            else {
                continue;
            };
            if let Some((k, v)) = kv.split_once('=') {
                if v.is_empty() {
                    self.0.remove(k.trim());
                } else {
                    self.0.insert(k.trim().to_string(), v.to_string());
                }
            }
        }
    }

    pub fn header(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Signs in at the provider as `login` the way a browser would (its dev login form), from
/// Tandem's `start` URL to the callback URL the provider sends the browser to. Returns that URL
/// and Tandem's cookies so far (the state cookie).
pub async fn through_provider(tandem: &str, start: &str, login: &str) -> (String, Jar) {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap();
    let mut tandem_jar = Jar::default();
    let res = http.get(format!("{tandem}{start}")).send().await.unwrap();
    assert_eq!(res.status(), 303, "start: {}", res.text().await.unwrap());
    tandem_jar.take(&res);
    let mut url = location(&res, "");
    let mut idp = Jar::default();
    for _ in 0..10 {
        if url.starts_with(tandem) {
            return (url, tandem_jar);
        }
        let res = http
            .get(&url)
            .header(reqwest::header::COOKIE, idp.header())
            .send()
            .await
            .unwrap();
        idp.take(&res);
        let origin = origin(&url);
        if res.status() == 200 {
            // The login form: post it.
            let action = url.clone();
            let res = http
                .post(&action)
                .header(reqwest::header::COOKIE, idp.header())
                .form(&[
                    ("prompt", "login"),
                    ("login", login),
                    ("password", "anything"),
                ])
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 303, "login form: {}", res.status());
            idp.take(&res);
            url = location(&res, &origin);
            continue;
        }
        assert_eq!(res.status(), 303, "at {url}: {}", res.status());
        url = location(&res, &origin);
    }
    panic!("the provider never sent the browser back to Tandem");
}

fn origin(url: &str) -> String {
    let u = reqwest::Url::parse(url).unwrap();
    format!("{}://{}", u.scheme(), u.host_str().unwrap())
        + &u.port().map(|p| format!(":{p}")).unwrap_or_default()
}

fn location(res: &reqwest::Response, origin: &str) -> String {
    let l = res
        .headers()
        .get(reqwest::header::LOCATION)
        .expect("a redirect")
        .to_str()
        .unwrap()
        .to_string();
    if l.starts_with('/') {
        format!("{origin}{l}")
    } else {
        l
    }
}
