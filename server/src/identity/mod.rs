//! Who a request is and who the people are: credentials and their checks (`auth`: API tokens,
//! JWTs, cookies, share links, sign-in flows), the people an admin manages (`people`: invites,
//! roles, deactivation), and the ways in (`oidc`: OpenID Connect; `github`: "Sign in with
//! GitHub" and importing the repositories the App is installed on).

pub mod auth;
pub mod github;
pub mod oidc;
pub mod people;
