//! The server's end of a workspace's egress proxy (a pod with an allow-list:
//! [`tandem_host::runtime::egress_proxy`]). Its processes' proxy connections arrive on the
//! workspace's gateway like any other: `CONNECT name:port` opens a tunnel when the workspace may
//! reach the name; an absolute-form plain HTTP request (`GET http://name/…`, what clients send
//! a proxy for `http://` URLs) goes on over a connection opened the same way. Every refusal
//! answers with what was refused and what to do.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tandem_host::runtime::egress_proxy::{self, Tunnel};

/// Whether `req` asks the gateway to reach out, rather than for one of its own routes.
pub fn asks_out(req: &Request) -> bool {
    req.method() == Method::CONNECT || req.uri().scheme().is_some()
}

/// Answers a request [`asks_out`] from workspace `wid`.
pub async fn serve(wid: &str, req: Request) -> Response {
    let Some(rules) = egress_proxy::rules(wid) else {
        return refuse(
            StatusCode::FORBIDDEN,
            "this workspace has no egress through the gateway: on a cluster, its recipe's `egress` (tandem.toml) names what it may reach",
        );
    };
    let Some(authority) = req.uri().authority().cloned() else {
        return refuse(StatusCode::BAD_REQUEST, "a proxy request names host:port");
    };
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let connect = req.method() == Method::CONNECT;
    let port = match (authority.port_u16(), connect, req.uri().scheme_str()) {
        (Some(p), _, _) => p,
        (None, false, Some("http")) => 80,
        (None, true, _) => return refuse(StatusCode::BAD_REQUEST, "CONNECT names host:port"),
        (None, false, _) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "only http:// URLs go through the proxy as plain requests; https:// ones go by CONNECT",
            );
        }
    };
    let tunnel = match rules.open(host, port).await {
        Ok(t) => t,
        Err(e) => {
            let status = match &e {
                tandem_host::Error::Forbidden(_) => StatusCode::FORBIDDEN,
                tandem_host::Error::Unavailable(_) => StatusCode::BAD_GATEWAY,
                _ => StatusCode::BAD_REQUEST,
            };
            return refuse(status, &e.to_string());
        }
    };
    if connect {
        tokio::spawn(async move {
            let Tunnel { mut stream, permit } = tunnel;
            if let Ok(up) = hyper::upgrade::on(req).await {
                let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(up), &mut stream).await;
            }
            drop(permit);
        });
        return StatusCode::OK.into_response();
    }
    // The Host header names the target alone (no user info a URL may carry).
    let target = match authority.port() {
        Some(p) => format!("{}:{}", authority.host(), p.as_str()),
        None => authority.host().to_string(),
    };
    forward(tunnel, &target, req).await
}

/// Sends a plain HTTP request on in origin form over `tunnel`.
async fn forward(tunnel: Tunnel, target: &str, mut req: Request) -> Response {
    let Tunnel { stream, permit } = tunnel;
    let (mut sender, conn) =
        match hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream)).await {
            Ok(h) => h,
            Err(e) => return refuse(StatusCode::BAD_GATEWAY, &format!("the connection out: {e}")),
        };
    tokio::spawn(async move {
        let _ = conn.await;
        drop(permit);
    });
    let path: Uri = match req.uri().path_and_query().map(|p| p.as_str().parse()) {
        Some(Ok(p)) => p,
        _ => Uri::from_static("/"),
    };
    *req.uri_mut() = path;
    // The proxy hop's own headers end here (and those the `Connection` header names), and
    // the target names the host: a request reaches the allowed name's server as that name.
    let named: Vec<String> = req
        .headers()
        .get_all(axum::http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|h| h.trim().to_ascii_lowercase()))
        .collect();
    for h in [
        "connection",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
    ]
    .into_iter()
    .map(str::to_string)
    .chain(named)
    {
        req.headers_mut().remove(h.as_str());
    }
    if let Ok(host) = axum::http::HeaderValue::from_str(target) {
        req.headers_mut().insert(axum::http::header::HOST, host);
    }
    match sender.send_request(req).await {
        Ok(res) => res.map(Body::new),
        Err(e) => refuse(StatusCode::BAD_GATEWAY, &format!("the request out: {e}")),
    }
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (status, format!("tandem egress: {why}\n")).into_response()
}
