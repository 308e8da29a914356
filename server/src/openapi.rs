//! The REST API's OpenAPI 3.1 document, `GET /api/openapi.json`. The router registers each API
//! route from its handler's `#[utoipa::path]` annotation ([`ApiRouter::routes`]), so a route and
//! its description are one step: the document lists exactly what the API serves, with the
//! bodies' schemas taken from the `tandem-protocol` types the handlers use.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};

use axum::extract::{Extension, Request};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::Route;
use tandem_protocol::ApiError;
use tandem_protocol::limits::{LIFECYCLE_TIMEOUT_SECS, REQUEST_TIMEOUT_SECS};
use tower::{Layer, Service};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{OpenApi, RefOr};
use utoipa::{Modify, ToSchema};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};

/// The API's router, each route registered with its description. It has no way to add a route
/// without one (no `route`), so an undocumented API route cannot be written.
pub struct ApiRouter<S>(OpenApiRouter<S>);

impl<S: Clone + Send + Sync + 'static> Default for ApiRouter<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: Clone + Send + Sync + 'static> ApiRouter<S> {
    pub fn new() -> Self {
        Self(OpenApiRouter::default())
    }

    /// Routes the handlers of `utoipa_axum::routes!(…)` (one path, a method each) at the path
    /// and methods their `#[utoipa::path]` names, and adds that description to the document.
    pub fn routes(self, handlers: UtoipaMethodRouter<S>) -> Self {
        Self(self.0.routes(handlers))
    }

    pub fn merge(self, other: ApiRouter<S>) -> Self {
        Self(self.0.merge(other.0))
    }

    /// A layer around this router's routes only (`axum::Router::route_layer`).
    pub fn route_layer<L>(self, layer: L) -> Self
    where
        L: Layer<Route> + Clone + Send + Sync + 'static,
        L::Service: Service<Request> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as Service<Request>>::Error: Into<Infallible> + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        Self(self.0.route_layer(layer))
    }

    /// The router, answering `GET /openapi.json` with the document of these routes as mounted
    /// at `/api` (its JSON text is made once per process: it depends on the code only).
    pub fn finish(self) -> axum::Router<S> {
        let (router, paths) = self
            .routes(utoipa_axum::routes!(openapi_json))
            .0
            .split_for_parts();
        static JSON: OnceLock<Arc<str>> = OnceLock::new();
        let json = JSON
            .get_or_init(|| {
                let mut doc = <ApiDoc as utoipa::OpenApi>::openapi().nest("/api", paths);
                CommonAnswers.modify(&mut doc);
                OptionalBodies.modify(&mut doc);
                serde_json::to_string(&doc)
                    .expect("the OpenAPI document serialises")
                    .into()
            })
            .clone();
        router.layer(Extension(Document(json)))
    }
}

/// The document as served.
#[derive(Clone)]
struct Document(Arc<str>);

/// This document. It holds no secret, so anyone may read it.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    operation_id = "openapi",
    security(()),
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of this API",
            content_type = "application/json", body = Object),
    ),
)]
async fn openapi_json(Extension(Document(json)): Extension<Document>) -> Response {
    (
        [
            (CONTENT_TYPE, "application/json"),
            (CACHE_CONTROL, "no-cache"),
        ],
        json.to_string(),
    )
        .into_response()
}

/// The document's frame: what it describes, how callers sign in, the tags.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Tandem REST API",
        description = "Every route under `/api`. Errors are `ApiError` bodies (`{code, message}`). \
            Sign in with an API token (`Authorization: Bearer tdm_…`, from `tandem token create` \
            or the Tokens page) or the browser's session cookie."
    ),
    modifiers(&SecuritySchemes),
    security(("bearer_token" = []), ("session_cookie" = [])),
    components(schemas(ApiError)),
    tags(
        (name = "meta", description = "This document and the server's health"),
        (name = "auth", description = "Signing in and out, sign-in providers"),
        (name = "tokens", description = "The signed-in person's API tokens"),
        (name = "people", description = "People, invites and who may use a repo"),
        (name = "repos", description = "Repos, their warm pools and snapshots"),
        (name = "sessions", description = "Sessions, their prompts, events and workspaces"),
        (name = "links", description = "Share links and the live channel"),
        (name = "github", description = "The GitHub App: repositories, pull requests, webhook"),
        (name = "slack", description = "The Slack app"),
        (name = "extension", description = "The Chrome extension: pairing and page rules"),
        (name = "automations", description = "Prompts a repo runs on a schedule or a webhook"),
        (name = "admin", description = "Settings, secrets and the audit log (admins)"),
        (name = "spend", description = "Prices, budgets, and what the agents cost and got merged"),
    )
)]
struct ApiDoc;

/// The two ways to be signed in (`crate::identity::auth::extract`).
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, doc: &mut OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let mut bearer = Http::new(HttpAuthScheme::Bearer);
        bearer.description = Some(
            "An API token (`tdm_…`), or the JWT of a browser sign-in; an extension token \
             (scope `extension`) may only start sessions, prompt and read"
                .into(),
        );
        components.add_security_scheme("bearer_token", SecurityScheme::Http(bearer));
        components.add_security_scheme(
            "session_cookie",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                tandem_protocol::limits::SESSION_COOKIE,
                "The browser's sign-in (`POST /api/auth/login`); named `__Host-tandem_session` \
                 when the public URL is https",
            ))),
        );
    }
}

/// What any API route may answer whatever its handler does: the request timeout, the body bound
/// and a server failure (the store's details stay in the log).
struct CommonAnswers;

impl Modify for CommonAnswers {
    fn modify(&self, doc: &mut OpenApi) {
        let answers = [
            (
                "408",
                format!(
                    "No answer within {REQUEST_TIMEOUT_SECS} seconds, {LIFECYCLE_TIMEOUT_SECS} for stopping, suspending, resuming or forking a workspace, which goes on to its end (`timeout`)"
                ),
            ),
            (
                "413",
                "The body is larger than the route allows (`payload_too_large`)".to_string(),
            ),
            (
                "500",
                "The server failed (`internal`); its log has the details".to_string(),
            ),
        ];
        for item in doc.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in operations.into_iter().flatten() {
                for (status, description) in &answers {
                    op.responses
                        .responses
                        .entry(status.to_string())
                        .or_insert_with(|| error_response(description));
                }
            }
        }
    }
}

/// An optional JSON body (`Option<Json<T>>`) is absent or a `T`, never `null`: utoipa writes
/// `Option<T>` as "`null` or `T`", which the extractor would refuse.
struct OptionalBodies;

impl Modify for OptionalBodies {
    fn modify(&self, doc: &mut OpenApi) {
        use utoipa::openapi::Required;
        use utoipa::openapi::schema::{Schema, SchemaType, Type};
        for item in doc.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in operations.into_iter().flatten() {
                let Some(body) = op.request_body.as_mut() else {
                    continue;
                };
                if body.required == Some(Required::True) {
                    continue;
                }
                for content in body.content.values_mut() {
                    let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema else {
                        continue;
                    };
                    let is_null = |s: &RefOr<Schema>| matches!(s, RefOr::T(Schema::Object(o)) if o.schema_type == SchemaType::Type(Type::Null));
                    let rest: Vec<_> = one_of.items.iter().filter(|s| !is_null(s)).collect();
                    if let [only] = rest[..]
                        && rest.len() < one_of.items.len()
                    {
                        content.schema = Some(only.clone());
                    }
                }
            }
        }
    }
}

/// An answer with an [`ApiError`] body.
fn error_response(description: &str) -> RefOr<utoipa::openapi::Response> {
    utoipa::openapi::ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            utoipa::openapi::ContentBuilder::new()
                .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                    ApiError::name(),
                ))))
                .build(),
        )
        .build()
        .into()
}

// The error answers handlers name in their `responses(…)`: each an `ApiError` body with a status.
// They are never built, only described.

/// 400: a path or query parameter that does not parse, or a malformed request.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 400,
    description = "Malformed: a path or query parameter that does not parse, or a request the route cannot read (`bad_request`)"
)]
#[allow(dead_code)]
pub struct BadRequest(ApiError);

/// What the `Json` extractor refuses.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum JsonBody {
    #[response(status = 400, description = "The body is not JSON (`bad_request`)")]
    Malformed(ApiError),
    #[response(
        status = 415,
        description = "The body is not sent as `application/json` (`unsupported_media_type`)"
    )]
    NotJson(ApiError),
    #[response(
        status = 422,
        description = "The body lacks a field, has an unknown one or a wrong type, or a value is not acceptable (`invalid_input`)"
    )]
    Invalid(ApiError),
}

/// 401.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 401,
    description = "No valid credential: sign in or send an API token (`unauthorized`)"
)]
#[allow(dead_code)]
pub struct Unauthorized(ApiError);

/// 403.
#[derive(utoipa::IntoResponses)]
#[response(status = 403, description = "Signed in, but not allowed (`forbidden`)")]
#[allow(dead_code)]
pub struct Forbidden(ApiError);

/// 404.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 404,
    description = "No such thing, or not one the caller may see (`not_found`)"
)]
#[allow(dead_code)]
pub struct NotFound(ApiError);

/// 409.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 409,
    description = "It conflicts with the current state (`conflict`, or a code of its own)"
)]
#[allow(dead_code)]
pub struct Conflict(ApiError);

/// 422.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 422,
    description = "Well-formed but not acceptable (`invalid_input`)"
)]
#[allow(dead_code)]
pub struct Invalid(ApiError);

/// 429.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 429,
    description = "Over a rate limit or budget (`too_many_requests`)"
)]
#[allow(dead_code)]
pub struct TooMany(ApiError);

/// 502.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 502,
    description = "A service the server depends on (GitHub, the model endpoint, the workspace) failed (`bad_gateway`)"
)]
#[allow(dead_code)]
pub struct BadGateway(ApiError);

/// 503.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 503,
    description = "Not available on this server yet, e.g. workspaces before the image is built, or Slack before its secrets are stored (`unavailable`)"
)]
#[allow(dead_code)]
pub struct Unavailable(ApiError);

/// A sign-in refused, as the page a browser lands on (`super::oidc::page`).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum RefusalPage {
    #[response(
        status = 400,
        description = "The answer lacks what it needs: a page that says so",
        content_type = "text/html"
    )]
    BadRequest(String),
    #[response(
        status = 401,
        description = "Not signed in: a page that says why",
        content_type = "text/html"
    )]
    Unauthorized(String),
    #[response(
        status = 403,
        description = "Refused (another site sent it, a cookie sent twice): a page",
        content_type = "text/html"
    )]
    Forbidden(String),
    #[response(
        status = 404,
        description = "No such provider, or it is not configured: a page",
        content_type = "text/html"
    )]
    NotFound(String),
    #[response(
        status = 409,
        description = "Conflicts with an existing person: a page",
        content_type = "text/html"
    )]
    Conflict(String),
    #[response(
        status = 429,
        description = "Too many sign-ins started from this address: a page",
        content_type = "text/html"
    )]
    TooMany(String),
    #[response(
        status = 500,
        description = "The server failed: a page",
        content_type = "text/html"
    )]
    Internal(String),
    #[response(
        status = 502,
        description = "The provider failed: a page",
        content_type = "text/html"
    )]
    BadGateway(String),
    #[response(
        status = 503,
        description = "Sign-in with this provider is not available yet: a page",
        content_type = "text/html"
    )]
    Unavailable(String),
}
