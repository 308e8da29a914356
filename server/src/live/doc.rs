//! One shared document: a file's text as a Yjs CRDT (`yrs`). What a person sends is decoded
//! and checked before it touches the document; what the workspace writes is never taken as a
//! CRDT update, only as new text, merged in as edits against what the workspace held before
//! (so an edit a person made meanwhile stays). Cursors (y-protocols awareness) are rewritten
//! with the name and colour the server knows, for the sender's own client only.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use similar::{Algorithm, DiffTag, TextDiffConfig};
use yrs::sync::awareness::{AwarenessUpdate, AwarenessUpdateEntry};
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;
use yrs::{ClientID, GetString, OffsetKind, Options, ReadTxn, StateVector, Text, Transact, Update};

/// The shared text's name in every document (the browser's `doc.getText('content')`).
pub const TEXT: &str = "content";
/// Longest a merge's diff may take before it settles for a coarser (still correct) one.
const DIFF_TIME: Duration = Duration::from_millis(20);
/// Largest cursor state kept (JSON bytes).
const MAX_CURSOR_JSON: usize = 2048;

/// A file's shared text.
pub struct Document {
    doc: yrs::Doc,
    text: yrs::TextRef,
}

impl Document {
    /// A document holding `content`.
    pub fn new(content: &str) -> Self {
        let doc = yrs::Doc::with_options(Options {
            offset_kind: OffsetKind::Bytes,
            ..Options::default()
        });
        let text = doc.get_or_insert_text(TEXT);
        if !content.is_empty() {
            text.insert(&mut doc.transact_mut(), 0, content);
        }
        Self { doc, text }
    }

    /// The text as it is now.
    pub fn text(&self) -> String {
        self.text.get_string(&self.doc.transact())
    }

    /// The whole document as one update (for someone opening it).
    pub fn state(&self) -> Vec<u8> {
        self.doc
            .transact()
            .encode_state_as_update_v1(&StateVector::default())
    }

    /// Applies a person's update. Refused, leaving the document as it was, when it does not
    /// decode; refused when it depends on edits the document has not seen (a client that
    /// follows the protocol never sends one) or when applying it fails.
    pub fn apply(&mut self, update: &[u8]) -> Result<(), String> {
        let decoded = catch_unwind(|| Update::decode_v1(update))
            .map_err(|_| "the update does not decode".to_string())?
            .map_err(|e| format!("the update does not decode: {e}"))?;
        let sv = self.doc.transact().state_vector();
        // Every item's left neighbour must be known: a gap would sit pending in the document.
        for (client, clock) in decoded.state_vector_lower().iter() {
            if *clock > sv.get(client) {
                return Err("the update depends on edits this document has not seen".into());
            }
        }
        let doc = &self.doc;
        catch_unwind(AssertUnwindSafe(|| {
            doc.transact_mut().apply_update(decoded)
        }))
        .map_err(|_| "the update could not be applied".to_string())?
        .map_err(|e| format!("the update could not be applied: {e}"))?;
        if self.doc.transact().store().pending_update().is_some() {
            return Err("the update depends on edits this document has not seen".into());
        }
        Ok(())
    }

    /// Brings the workspace's change (`base` → `new`) into the document, whose text may have
    /// moved on from `base` with people's edits: each of the workspace's changes lands where
    /// its place is now, deleting only what the workspace deleted and people still had. Returns
    /// the update that made it, for everyone else; `None` when nothing changed.
    pub fn merge(&mut self, base: &str, new: &str) -> Option<Vec<u8>> {
        let current = self.text();
        let ours = char_ops(base, new);
        if ours.iter().all(|(tag, ..)| *tag == DiffTag::Equal) {
            return None;
        }
        // Base characters that people kept, as runs (base start, current start, length).
        let kept: Vec<(usize, usize, usize)> = char_ops(base, &current)
            .into_iter()
            .filter(|(tag, ..)| *tag == DiffTag::Equal)
            .map(|(_, o, n, _)| (o.start, n.start, o.len()))
            .collect();
        let at = |b: usize| -> usize {
            // A kept base character maps to its place now; any other to just after the last
            // kept run before it.
            let mut pos = 0;
            for &(bs, cs, len) in &kept {
                if b < bs {
                    break;
                }
                if b < bs + len {
                    return cs + (b - bs);
                }
                pos = cs + len;
            }
            pos
        };
        // Edits in current characters: (position, characters to delete, text to insert).
        let mut edits: Vec<(usize, usize, String)> = Vec::new();
        for (tag, old, _, inserted) in ours {
            if tag == DiffTag::Equal {
                continue;
            }
            for &(bs, cs, len) in &kept {
                let (s, e) = (old.start.max(bs), old.end.min(bs + len));
                if s < e {
                    edits.push((cs + (s - bs), e - s, String::new()));
                }
            }
            if !inserted.is_empty() {
                edits.push((at(old.start), 0, inserted));
            }
        }
        // From the end, so earlier positions stay valid; at one place the delete goes first.
        edits.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        let bytes: Vec<usize> = current
            .char_indices()
            .map(|(i, _)| i)
            .chain([current.len()])
            .collect();
        let mut txn = self.doc.transact_mut();
        for (pos, delete, insert) in edits {
            let start = bytes[pos.min(bytes.len() - 1)] as u32;
            if delete > 0 {
                let end = bytes[(pos + delete).min(bytes.len() - 1)] as u32;
                self.text.remove_range(&mut txn, start, end - start);
            }
            if !insert.is_empty() {
                self.text.insert(&mut txn, start, &insert);
            }
        }
        Some(txn.encode_update_v1())
    }
}

/// The character-level difference of `a` and `b`: (tag, range in `a`, range in `b`, the text
/// of `b`'s range), in character indices. A common prefix and suffix are taken off first, so
/// a small change in a large file diffs only its middle.
fn char_ops(
    a: &str,
    b: &str,
) -> Vec<(
    DiffTag,
    std::ops::Range<usize>,
    std::ops::Range<usize>,
    String,
)> {
    let prefix: usize = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    let (a_rest, b_rest): (String, String) = (
        a.chars().skip(prefix).collect(),
        b.chars().skip(prefix).collect(),
    );
    let suffix = a_rest
        .chars()
        .rev()
        .zip(b_rest.chars().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let a_mid: Vec<char> = a_rest.chars().collect();
    let b_mid: Vec<char> = b_rest.chars().collect();
    let a_mid: String = a_mid[..a_mid.len() - suffix].iter().collect();
    let b_mid: String = b_mid[..b_mid.len() - suffix].iter().collect();
    let b_chars: Vec<char> = b_mid.chars().collect();
    let mut out = Vec::new();
    if prefix > 0 {
        out.push((DiffTag::Equal, 0..prefix, 0..prefix, String::new()));
    }
    let diff = TextDiffConfig::default()
        .algorithm(Algorithm::Myers)
        .timeout(DIFF_TIME)
        .diff_chars(a_mid.as_str(), b_mid.as_str());
    for op in diff.ops() {
        let (tag, o, n) = op.as_tag_tuple();
        let text = if tag == DiffTag::Equal {
            String::new()
        } else {
            b_chars[n.clone()].iter().collect()
        };
        out.push((
            tag,
            o.start + prefix..o.end + prefix,
            n.start + prefix..n.end + prefix,
            text,
        ));
    }
    let (a_end, b_end) = (a.chars().count(), b.chars().count());
    if suffix > 0 {
        out.push((
            DiffTag::Equal,
            a_end - suffix..a_end,
            b_end - suffix..b_end,
            String::new(),
        ));
    }
    out
}

/// Who a cursor belongs to, as everyone is shown it.
#[derive(Clone)]
pub struct User {
    pub name: String,
    pub colour: &'static str,
}

/// The colour of participant `id`'s cursor.
pub fn colour(id: u32) -> &'static str {
    const COLOURS: [&str; 8] = [
        "#e06c75", "#61afef", "#98c379", "#c678dd", "#d19a66", "#56b6c2", "#be5046", "#e5c07b",
    ];
    COLOURS[id as usize % COLOURS.len()]
}

/// Everyone's cursors in one document: each client's latest state.
#[derive(Default)]
pub struct Cursors {
    states: HashMap<u64, (u32, Arc<str>)>,
}

impl Cursors {
    /// Checks a participant's awareness update and rewrites it: exactly one client, theirs
    /// (`client` is set on their first), its `user` replaced by `user`, nothing kept but the
    /// cursor. Returns the rewritten update for the others.
    pub fn accept(
        &mut self,
        update: &[u8],
        client: &mut Option<u64>,
        taken: impl Fn(u64) -> bool,
        user: &User,
    ) -> Result<Vec<u8>, String> {
        let decoded = catch_unwind(|| AwarenessUpdate::decode_v1(update))
            .map_err(|_| "the cursor update does not decode".to_string())?
            .map_err(|e| format!("the cursor update does not decode: {e}"))?;
        let mut entries = decoded.clients.into_iter();
        let (Some((id, entry)), None) = (entries.next(), entries.next()) else {
            return Err("a cursor update carries exactly one client: yours".into());
        };
        let id = id.get();
        match *client {
            Some(mine) if mine != id => {
                return Err("a cursor update names another client".into());
            }
            None if taken(id) => return Err("that client is someone else's".into()),
            _ => *client = Some(id),
        }
        let state: serde_json::Value = serde_json::from_str(&entry.json)
            .map_err(|e| format!("the cursor state is not JSON: {e}"))?;
        let json = match state {
            serde_json::Value::Null => "null".to_string(),
            serde_json::Value::Object(o) => {
                let cursor = o
                    .get("cursor")
                    .filter(|c| c.is_object() && c.to_string().len() <= MAX_CURSOR_JSON)
                    .cloned()
                    .unwrap_or(serde_json::Value::Null);
                serde_json::json!({
                    "user": { "name": user.name, "color": user.colour, "colorLight": format!("{}33", user.colour) },
                    "cursor": cursor,
                })
                .to_string()
            }
            _ => return Err("the cursor state is not an object".into()),
        };
        let json: Arc<str> = json.into();
        self.states.insert(id, (entry.clock, json.clone()));
        Ok(encode(id, entry.clock, json))
    }

    /// `client` left: the update that removes its cursor everywhere.
    pub fn remove(&mut self, client: u64) -> Option<Vec<u8>> {
        let (clock, _) = self.states.remove(&client)?;
        Some(encode(client, clock.wrapping_add(1), "null".into()))
    }

    /// Every cursor, as one update for someone opening the document (empty: none).
    pub fn all(&self) -> Vec<u8> {
        let clients: HashMap<ClientID, AwarenessUpdateEntry> = self
            .states
            .iter()
            .filter(|(_, (_, json))| &**json != "null")
            .map(|(&id, (clock, json))| {
                (
                    ClientID::new(id),
                    AwarenessUpdateEntry {
                        clock: *clock,
                        json: json.clone(),
                    },
                )
            })
            .collect();
        if clients.is_empty() {
            return Vec::new();
        }
        AwarenessUpdate { clients }.encode_v1()
    }
}

fn encode(client: u64, clock: u32, json: Arc<str>) -> Vec<u8> {
    let mut clients = HashMap::new();
    clients.insert(ClientID::new(client), AwarenessUpdateEntry { clock, json });
    AwarenessUpdate { clients }.encode_v1()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(doc: &mut Document, at: u32, insert: &str) -> Vec<u8> {
        let mut txn = doc.doc.transact_mut();
        doc.text.insert(&mut txn, at, insert);
        txn.encode_update_v1()
    }

    #[test]
    fn a_workspace_change_keeps_what_a_person_typed_meanwhile() {
        let base = "fn main() {\n    println!(\"hi\");\n}\n";
        let mut doc = Document::new(base);
        // A person types a comment on the first line...
        edit(&mut doc, 0, "// mine\n");
        // ...while the agent, from the file it read, renames the greeting.
        let new = base.replace("\"hi\"", "\"hello\"");
        let update = doc.merge(base, &new).expect("a change");
        assert_eq!(
            doc.text(),
            "// mine\nfn main() {\n    println!(\"hello\");\n}\n"
        );
        // The update brings another copy of the document to the same text.
        let mut other = Document::new("");
        other.apply(&doc.state()).unwrap();
        assert_eq!(other.text(), doc.text());
        assert!(!update.is_empty());
    }

    #[test]
    fn a_deletion_by_the_workspace_spares_text_a_person_put_inside_it() {
        let base = "aaa XYZ bbb";
        let mut doc = Document::new(base);
        edit(&mut doc, 5, "!!"); // "aaa X!!YZ bbb"
        doc.merge(base, "aaa bbb").unwrap();
        let text = doc.text();
        assert!(
            text == "aaa !!bbb" || text == "aaa!! bbb",
            "the workspace's deletion, the person's insert: {text:?}"
        );
    }

    #[test]
    fn multibyte_text_merges_at_character_boundaries() {
        let base = "héllo wörld";
        let mut doc = Document::new(base);
        edit(&mut doc, 0, "¡");
        doc.merge(base, "héllo, wörld!").unwrap();
        assert_eq!(doc.text(), "¡héllo, wörld!");
        assert!(doc.merge("same", "same").is_none());
    }

    #[test]
    fn malformed_and_out_of_order_updates_leave_the_document_as_it_was() {
        let mut doc = Document::new("keep me");
        for junk in [
            &b""[..],
            b"\xff\xff\xff\xff",
            b"\x01\x01\x80\x80\x80\x80\x80\x80\x80\x80\x80",
        ] {
            assert!(doc.apply(junk).is_err());
            assert_eq!(doc.text(), "keep me");
        }
        // Two edits of another copy; the second alone depends on the first.
        let mut other = Document::new("");
        other.apply(&doc.state()).unwrap();
        edit(&mut other, 0, "a");
        let second = edit(&mut other, 1, "b");
        assert!(doc.apply(&second).is_err());
        assert_eq!(doc.text(), "keep me");
    }

    #[test]
    fn a_cursor_update_is_rewritten_with_the_servers_name_and_only_for_its_own_client() {
        let mut cursors = Cursors::default();
        let ada = User {
            name: "Ada".into(),
            colour: colour(1),
        };
        let forged = encode(
            7,
            1,
            r#"{"user":{"name":"Admin"},"cursor":{"anchor":{}},"x":1}"#.into(),
        );
        let mut client = None;
        let out = cursors
            .accept(&forged, &mut client, |_| false, &ada)
            .unwrap();
        assert_eq!(client, Some(7));
        let back = AwarenessUpdate::decode_v1(&out).unwrap();
        let json = &back.clients[&ClientID::new(7)].json;
        assert!(
            json.contains("\"Ada\"") && !json.contains("Admin") && !json.contains("\"x\""),
            "{json}"
        );
        // Another client's id is refused, as is a client another member holds.
        let other = encode(8, 1, "{}".into());
        assert!(
            cursors
                .accept(&other, &mut client, |_| false, &ada)
                .is_err()
        );
        let mut fresh = None;
        assert!(
            cursors
                .accept(&other, &mut fresh, |id| id == 8, &ada)
                .is_err()
        );
        assert!(!cursors.all().is_empty());
        assert!(cursors.remove(7).is_some());
        assert!(cursors.all().is_empty());
    }
}
