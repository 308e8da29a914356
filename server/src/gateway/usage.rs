//! The tokens of a model answer as the provider reports them, read from the answer while it
//! streams through the gateway to the workspace: an event stream's `usage` chunk, or a whole
//! answer's `usage` object. What the workspace later says of its tokens is never counted.
//!
//! An answer that reports none (a provider that does not, or one cut short) is counted from
//! its size: a token per four bytes of the request and of the answer, so a budget is never
//! passed by leaving the usage out.

use serde_json::Value;

/// Longest line of an event stream looked into; a longer one (a huge text delta) holds no
/// usage worth reading and is skipped.
const MAX_LINE: usize = 1024 * 1024;

/// Most bytes of a whole (not streamed) answer kept to read its usage.
const MAX_WHOLE: usize = 16 * 1024 * 1024;

/// Prompt and completion tokens of one answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    pub prompt: i64,
    pub completion: i64,
    /// False when counted from sizes (the provider reported none).
    pub reported: bool,
}

/// Reads an answer's usage as its bytes pass.
pub struct UsageTap {
    stream: bool,
    line: Vec<u8>,
    skipping: bool,
    whole: Vec<u8>,
    answer_bytes: usize,
    request_bytes: usize,
    found: Option<(i64, i64)>,
}

impl UsageTap {
    /// A tap for an answer of `content_type` to a request of `request_bytes`.
    pub fn new(content_type: &str, request_bytes: usize) -> Self {
        Self {
            stream: content_type.starts_with("text/event-stream"),
            line: Vec::new(),
            skipping: false,
            whole: Vec::new(),
            answer_bytes: 0,
            request_bytes,
            found: None,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        self.answer_bytes += chunk.len();
        if !self.stream {
            if self.whole.len() + chunk.len() <= MAX_WHOLE {
                self.whole.extend_from_slice(chunk);
            } else {
                self.whole = Vec::new();
                self.skipping = true;
            }
            return;
        }
        let mut rest = chunk;
        while let Some(i) = rest.iter().position(|b| *b == b'\n') {
            if !self.skipping && self.line.len() + i <= MAX_LINE {
                self.line.extend_from_slice(&rest[..i]);
                let line = std::mem::take(&mut self.line);
                self.event_line(&line);
            }
            self.line.clear();
            self.skipping = false;
            rest = &rest[i + 1..];
        }
        if !self.skipping {
            if self.line.len() + rest.len() <= MAX_LINE {
                self.line.extend_from_slice(rest);
            } else {
                self.line.clear();
                self.skipping = true;
            }
        }
    }

    fn event_line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        // Most chunks are text deltas: only one that names usage is parsed.
        if !data.windows(7).any(|w| w == b"\"usage\"") {
            return;
        }
        if let Ok(v) = serde_json::from_slice::<Value>(data.trim_ascii()) {
            self.take_usage(&v);
        }
    }

    fn take_usage(&mut self, v: &Value) {
        let u = &v["usage"];
        let n = |k: &str| u[k].as_i64().filter(|n| *n >= 0);
        if let (Some(p), Some(c)) = (n("prompt_tokens"), n("completion_tokens")) {
            self.found = Some((p, c));
        }
    }

    /// The answer's tokens, once it ended (or was cut short).
    pub fn finish(mut self) -> Tokens {
        if !self.stream && !self.skipping && !self.whole.is_empty() {
            let whole = std::mem::take(&mut self.whole);
            if let Ok(v) = serde_json::from_slice::<Value>(&whole) {
                self.take_usage(&v);
            }
        }
        match self.found {
            Some((prompt, completion)) => Tokens {
                prompt,
                completion,
                reported: true,
            },
            None => Tokens {
                prompt: (self.request_bytes / 4) as i64,
                completion: (self.answer_bytes / 4) as i64,
                reported: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streams_usage_chunk_is_read_across_chunk_boundaries() {
        let mut t = UsageTap::new("text/event-stream; charset=utf-8", 400);
        let body = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":7}}\n\ndata: [DONE]\n\n";
        for piece in body.as_bytes().chunks(5) {
            t.feed(piece);
        }
        assert_eq!(
            t.finish(),
            Tokens {
                prompt: 120,
                completion: 7,
                reported: true
            }
        );
    }

    #[test]
    fn a_whole_answers_usage_is_read() {
        let mut t = UsageTap::new("application/json", 10);
        t.feed(br#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#);
        assert_eq!((t.finish().prompt, 2), (5, 2));
    }

    #[test]
    fn an_answer_without_usage_is_counted_from_its_size() {
        let mut t = UsageTap::new("text/event-stream", 4000);
        t.feed(&[b'x'; 800]);
        let n = t.finish();
        assert_eq!((n.prompt, n.completion, n.reported), (1000, 200, false));
        // A usage with negative or missing numbers is no usage.
        let mut t = UsageTap::new("application/json", 40);
        t.feed(br#"{"usage":{"prompt_tokens":-5,"completion_tokens":2}}"#);
        assert!(!t.finish().reported);
    }

    #[test]
    fn an_endless_line_is_skipped_not_kept() {
        let mut t = UsageTap::new("text/event-stream", 0);
        for _ in 0..(MAX_LINE / 1024 + 10) {
            t.feed(&[b'a'; 1024]);
        }
        assert!(t.line.is_empty() && t.skipping);
        t.feed(b"\ndata: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n");
        assert!(t.finish().reported);
    }
}
