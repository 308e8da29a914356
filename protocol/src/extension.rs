//! The Chrome extension's pairing, device style: the extension asks for a pairing and shows its
//! code; the person approves the code in the web app where they are signed in; the extension
//! polls with its device secret and takes a scoped, expiring, revocable token, once.

use serde::{Deserialize, Serialize};

use crate::CreatedToken;

/// `POST /api/extension/pairings`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartPairing {
    /// What the token will be called in the person's token list ("Chrome on laptop").
    #[serde(default)]
    pub label: Option<String>,
}

/// A pairing in flight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Pairing {
    /// The extension's secret for polling (never shown to the person).
    pub device_code: String,
    /// What the person checks and approves: `ABCD-EFGH`.
    pub user_code: String,
    /// Where the person approves it (the web app, signed in): `/pair#id=<pairing id>`, a page
    /// that shows what asks and takes the code typed, never from the link.
    pub approve_url: String,
    pub expires_in_secs: i64,
    /// Seconds between polls.
    pub interval_secs: i64,
}

/// `POST /api/extension/pairings/approve` (a signed-in person).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ApprovePairing {
    pub user_code: String,
    /// The pairing the page showed (from its link): the code must be that pairing's.
    #[serde(default)]
    pub pairing_id: Option<String>,
}

/// `GET /api/extension/pairings/{id}` (a signed-in person): what asks to be paired, shown
/// before the person types the code the extension shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PairingRequest {
    pub id: String,
    /// The name the extension gave (its token's name once approved).
    pub label: String,
    /// When it asked.
    pub created_at: crate::Timestamp,
    pub expires_at: crate::Timestamp,
    /// The address the request came from, as the server saw it.
    pub address: Option<String>,
    /// Approved already (by someone).
    pub approved: bool,
}

/// What `POST /api/extension/pairings/approve` answers: the approved pairing's label.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovedPairing {
    pub label: String,
}

/// `POST /api/extension/pairings/poll` (the extension).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PollPairing {
    pub device_code: String,
}

/// What a poll answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum PairingPoll {
    /// Not approved yet: poll again after the interval.
    Pending,
    /// Approved: the extension's token (shown this once).
    Approved { token: CreatedToken },
}

/// What `GET /api/extension/hello` answers (no sign-in): the extension checks it before pairing,
/// so an address that is not Tandem gets a clear message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Hello {
    /// Always [`PRODUCT`].
    pub product: String,
    pub name: String,
    pub version: String,
    /// The id of the extension this server signs (`/extension/tandem.crx`), for the policy.
    #[serde(default)]
    pub extension_id: String,
}

/// [`Hello::product`].
pub const PRODUCT: &str = "tandem";

/// A page, as the extension sends it with a prompt (`context` of `POST /api/sessions` and of a
/// prompt). Everything in it comes from a web page: bounded and checked by the server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PageContext {
    /// http or https.
    pub url: String,
    #[serde(default)]
    pub title: String,
    /// The element the person picked.
    #[serde(default)]
    pub element: Option<PickedElement>,
    /// At most one of each kind, PNG.
    #[serde(default, deserialize_with = "at_most::<_, 2, _>")]
    #[cfg_attr(feature = "openapi", schema(max_items = 2))]
    pub screenshots: Vec<Screenshot>,
    /// The page's recent console errors, when the person ticked the box.
    #[serde(
        default,
        deserialize_with = "at_most::<_, { crate::limits::MAX_CONSOLE_ERRORS }, _>"
    )]
    #[cfg_attr(feature = "openapi", schema(max_items = 20))]
    pub console_errors: Vec<String>,
}

/// A list of at most `N` items: one longer is refused while it is read, so a body of millions of
/// tiny items never becomes millions of values.
fn at_most<'de, T, const N: usize, D>(d: D) -> Result<Vec<T>, D::Error>
where
    T: Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    struct Bounded<T, const N: usize>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>, const N: usize> serde::de::Visitor<'de> for Bounded<T, N> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a list of at most {N} items")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element()? {
                if out.len() == N {
                    return Err(serde::de::Error::custom(format!(
                        "a list of at most {N} items"
                    )));
                }
                out.push(item);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Bounded::<T, N>(std::marker::PhantomData))
}

/// A picked element.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PickedElement {
    /// A CSS selector that finds it.
    pub selector: String,
    /// Its outer HTML, cut by the extension to a bound.
    pub outer_html: String,
    /// How long the whole outer HTML was, in bytes (more than `outer_html` when it was cut).
    pub outer_html_bytes: u64,
    /// Its text, whitespace collapsed.
    #[serde(default)]
    pub text: String,
    /// Its box in the viewport, CSS pixels.
    pub rect: ElementBox,
    #[serde(default = "one")]
    pub device_pixel_ratio: f64,
    /// React component names around it, outermost first (where the page has fiber data).
    #[serde(
        default,
        deserialize_with = "at_most::<_, { crate::limits::MAX_COMPONENTS }, _>"
    )]
    #[cfg_attr(feature = "openapi", schema(max_items = 32))]
    pub components: Vec<String>,
}

fn one() -> f64 {
    1.0
}

/// A box in CSS pixels, viewport coordinates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ElementBox {
    pub x: i64,
    pub y: i64,
    pub width: i64,
    pub height: i64,
}

/// Which screenshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ScreenshotKind {
    /// The visible tab cropped to the element.
    Element,
    /// The whole visible tab.
    View,
}

impl ScreenshotKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Element => "element",
            Self::View => "view",
        }
    }
}

/// A screenshot as sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Screenshot {
    pub kind: ScreenshotKind,
    /// PNG, base64 (standard alphabet, no `data:` prefix).
    pub png_base64: String,
}

/// A page's context as kept with its prompt and shown in timelines: the screenshots are the
/// session's artifacts (`/api/sessions/{id}/artifacts/{artifact}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PromptContext {
    pub url: String,
    pub title: String,
    #[serde(default)]
    pub element: Option<ElementContext>,
    #[serde(default)]
    pub screenshots: Vec<ContextImage>,
    #[serde(default)]
    pub console_errors: Vec<String>,
}

/// A picked element as kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ElementContext {
    pub selector: String,
    pub outer_html: String,
    /// The outer HTML was longer than what is kept ([`crate::limits::MAX_OUTER_HTML_BYTES`]).
    pub outer_html_cut: bool,
    pub outer_html_bytes: u64,
    pub text: String,
    pub rect: ElementBox,
    pub device_pixel_ratio: f64,
    pub components: Vec<String>,
}

/// A screenshot kept as an artifact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContextImage {
    pub kind: ScreenshotKind,
    pub artifact: crate::ArtifactId,
    pub width: u32,
    pub height: u32,
}

/// One URL-pattern → repo rule: pages matching `pattern` (`*` matches anything) default to the
/// repo in the extension. `GET /api/extension/rules` lists those whose repo the person sees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PageRule {
    pub pattern: String,
    pub repo_id: crate::RepoId,
    pub repo_name: String,
}

/// One rule of `PUT /api/extension/rules` (admins; the list replaces the old one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetPageRule {
    pub pattern: String,
    pub repo_id: crate::RepoId,
}

/// Whether `url` matches a rule's `pattern`: `*` matches any run of characters, everything else
/// itself, and the whole URL must match.
pub fn pattern_matches(pattern: &str, url: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = parts.split_first().expect("split yields one part");
    let Some(mut tail) = url.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty();
    };
    for part in middle {
        match tail.find(part) {
            Some(at) => tail = &tail[at + part.len()..],
            None => return false,
        }
    }
    tail.len() >= last.len() && tail.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::pattern_matches;

    #[test]
    fn patterns_match_whole_urls_with_stars_for_anything() {
        assert!(pattern_matches(
            "https://app.acme.com/*",
            "https://app.acme.com/orders/7"
        ));
        assert!(pattern_matches(
            "https://app.acme.com/*",
            "https://app.acme.com/"
        ));
        assert!(!pattern_matches(
            "https://app.acme.com/*",
            "https://app.acme.com.evil.io/"
        ));
        assert!(!pattern_matches(
            "https://app.acme.com/*",
            "http://app.acme.com/"
        ));
        assert!(pattern_matches(
            "https://*.acme.com/*/edit",
            "https://a.acme.com/x/y/edit"
        ));
        assert!(!pattern_matches(
            "https://*.acme.com/*/edit",
            "https://a.acme.com/x/edit/z"
        ));
        assert!(pattern_matches("https://acme.com/", "https://acme.com/"));
        assert!(!pattern_matches("https://acme.com/", "https://acme.com/x"));
        // A star cannot match the same text twice.
        assert!(!pattern_matches("a*ab", "ab"));
    }

    /// The OpenAPI schema's list bounds are literals (utoipa takes no constant there): they must
    /// be the bounds `at_most` enforces.
    #[cfg(feature = "openapi")]
    #[test]
    fn schema_bounds_are_the_limits() {
        use crate::limits::{MAX_COMPONENTS, MAX_CONSOLE_ERRORS};
        use utoipa::PartialSchema;
        let page = serde_json::to_value(super::PageContext::schema()).unwrap();
        assert_eq!(page["properties"]["screenshots"]["maxItems"], 2);
        assert_eq!(
            page["properties"]["console_errors"]["maxItems"],
            MAX_CONSOLE_ERRORS
        );
        let element = serde_json::to_value(super::PickedElement::schema()).unwrap();
        assert_eq!(
            element["properties"]["components"]["maxItems"],
            MAX_COMPONENTS
        );
    }
}
