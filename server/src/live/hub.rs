//! The session hub: core logic of a live session, independent of message transport. Members
//! (one per live channel) get terminal output, presence and control changes through their
//! [`Outbox`]; terminal input and control requests come in through [`Hub`]'s methods, which
//! enforce roles. All state sits behind one short-held mutex (never across `.await`), so a
//! new member's scrollback snapshot and the fan-out that follows it cannot interleave.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use tandem_protocol::live::*;
use tokio::sync::mpsc;

pub use super::outbox::{CloseSignal, Inbox, Out, Outbox, outbox, size};

/// What a terminal's upstream (the workspace agent's PTY) is asked to do.
#[derive(Debug)]
pub enum Upstream {
    Input(Vec<u8>),
    Resize { cols: u16, rows: u16 },
}

/// Bound of the queue of input to one terminal.
pub const UPSTREAM_QUEUE: usize = 256;

struct TerminalState {
    info: Terminal,
    /// The last [`TERMINAL_SCROLLBACK_BYTES`] of output, for late joiners.
    ring: std::collections::VecDeque<u8>,
    upstream: mpsc::Sender<Upstream>,
}

struct Member {
    info: Participant,
    jti: Option<String>,
    out: Outbox,
    /// Terminal sizes this member reported (drivers).
    sizes: HashMap<u32, (u16, u16)>,
    /// When this member's presence was last sent to the others.
    presence_sent: Option<std::time::Instant>,
    /// A newer presence was held back and is owed to the others.
    presence_held: bool,
    /// Named in the others' participant lists; otherwise counted in the audience.
    listed: bool,
}

/// Members counted in the audience, not listed.
fn unlisted(st: &State) -> u32 {
    st.unlisted.len() as u32
}

#[derive(Default)]
struct State {
    members: BTreeMap<u32, Member>,
    controller: Option<u32>,
    terminals: BTreeMap<u32, TerminalState>,
    /// Viewers listed by name.
    listed_viewers: usize,
    /// Members not listed, longest waiting first.
    unlisted: std::collections::BTreeSet<u32>,
}

/// One live session.
pub struct Hub {
    state: Mutex<State>,
    next_id: AtomicU32,
    /// The terminal list as its latest `terminals` message. A watch, not a queue: a member
    /// gets the newest list when it gets to it. (Participants change by small deltas instead,
    /// queued in order: a list per change would cost N² bytes for N joins.)
    screens: tokio::sync::watch::Sender<bytes::Bytes>,
    /// How many viewers are not listed: a watch too, each member sent the newest count at
    /// most once per [`AUDIENCE_INTERVAL_MS`] (a crowd joining costs each member a few
    /// messages a second, not one per newcomer).
    audience: tokio::sync::watch::Sender<u32>,
}

/// A member's views of the hub's current state.
pub struct Watches {
    /// The terminal list as a JSON text message (shared, not copied per member).
    pub screens: tokio::sync::watch::Receiver<bytes::Bytes>,
    pub audience: tokio::sync::watch::Receiver<u32>,
}

/// Presence changes of one member closer together than this are held back and the newest sent
/// once the interval has passed (a client flooding presence would otherwise cost every member
/// a message each).
pub const PRESENCE_MIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// Why a request was refused (sent back as `refused`).
pub type Refusal = String;

impl Default for Hub {
    fn default() -> Self {
        Self {
            state: Mutex::new(State::default()),
            next_id: AtomicU32::new(1),
            screens: tokio::sync::watch::channel(bytes::Bytes::new()).0,
            audience: tokio::sync::watch::channel(0).0,
        }
    }
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a member: it gets `hello` (made from its record, the listed participants, who
    /// holds control, the terminals and the audience), every terminal's scrollback, then
    /// everything after it. The others get `joined`, or a new audience count for a viewer past
    /// [`LISTED_VIEWERS`].
    pub fn join(
        &self,
        name: String,
        user_id: Option<tandem_protocol::UserId>,
        role: Role,
        jti: Option<String>,
        out: Outbox,
        hello: impl FnOnce(&Participant, Vec<Participant>, Option<u32>, Vec<Terminal>, u32) -> WsServer,
    ) -> (Participant, Watches) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let info = Participant {
            id,
            name,
            role,
            user_id,
            looking_at: None,
        };
        let mut st = self.lock();
        let listed = role != Role::Viewer || st.listed_viewers < LISTED_VIEWERS;
        let mut named: Vec<Participant> = st
            .members
            .values()
            .filter(|m| m.listed)
            .map(|m| m.info.clone())
            .collect();
        if listed {
            named.push(info.clone());
        }
        let audience = unlisted(&st) + u32::from(!listed);
        out.send(&hello(
            &info,
            named,
            st.controller,
            st.terminals.values().map(|t| t.info.clone()).collect(),
            audience,
        ));
        // The scrollback of every terminal fits in half a fresh member's queue.
        let budget = MAX_QUEUED_BYTES / 2 / st.terminals.len().max(1);
        for t in st.terminals.values() {
            let (a, b) = t.ring.as_slices();
            let mut bytes = a.to_vec();
            bytes.extend_from_slice(b);
            let over = bytes.len().saturating_sub(budget);
            bytes.drain(..over);
            if !bytes.is_empty() {
                out.push(Out::Binary(encode_terminal(t.info.id, &bytes).into()));
            }
        }
        st.members.insert(
            id,
            Member {
                info: info.clone(),
                jti,
                out,
                sizes: HashMap::new(),
                presence_sent: None,
                presence_held: false,
                listed,
            },
        );
        // Subscribed under the lock, after the hello: what it shows is already in the hello.
        if !listed {
            st.unlisted.insert(id);
            self.audience.send_replace(audience);
        } else if role == Role::Viewer {
            st.listed_viewers += 1;
        }
        let watches = Watches {
            screens: self.screens.subscribe(),
            audience: self.audience.subscribe(),
        };
        if listed {
            Self::broadcast(
                &st,
                &WsServer::Joined {
                    participant: info.clone(),
                },
                Some(id),
            );
        }
        (info, watches)
    }

    /// Removes a member (its channel ended). True when no one is left.
    pub fn leave(&self, id: u32) -> bool {
        let mut st = self.lock();
        if let Some(gone) = st.members.remove(&id) {
            if !gone.listed {
                st.unlisted.remove(&id);
            } else {
                Self::broadcast(&st, &WsServer::Left { id }, None);
                if gone.info.role == Role::Viewer {
                    st.listed_viewers -= 1;
                    // The longest-waiting viewer not listed takes the place.
                    if let Some(next) = st.unlisted.pop_first()
                        && let Some(m) = st.members.get_mut(&next)
                    {
                        m.listed = true;
                        let joined = WsServer::Joined {
                            participant: m.info.clone(),
                        };
                        st.listed_viewers += 1;
                        Self::broadcast(&st, &joined, None);
                    }
                }
            }
            self.audience.send_if_modified(|n| {
                let now = unlisted(&st);
                std::mem::replace(n, now) != now
            });
            if st.controller == Some(id) {
                st.controller = None;
                Self::broadcast_control(&st);
            }
            let resized = recompute_sizes(&mut st);
            if resized {
                self.publish_screens(&st);
            }
        }
        st.members.is_empty()
    }

    /// Who is here and who holds control.
    pub fn snapshot(&self) -> (Vec<Participant>, Option<u32>, Vec<Terminal>) {
        let st = self.lock();
        (
            st.members.values().map(|m| m.info.clone()).collect(),
            st.controller,
            st.terminals.values().map(|t| t.info.clone()).collect(),
        )
    }

    /// A terminal whose output now flows through [`Hub::output`].
    pub fn add_terminal(&self, info: Terminal, upstream: mpsc::Sender<Upstream>) {
        let mut st = self.lock();
        st.terminals.insert(
            info.id,
            TerminalState {
                info,
                ring: Default::default(),
                upstream,
            },
        );
        self.publish_screens(&st);
    }

    /// A terminal ended.
    pub fn remove_terminal(&self, id: u32) {
        let mut st = self.lock();
        if st.terminals.remove(&id).is_some() {
            self.publish_screens(&st);
        }
    }

    pub fn has_terminal(&self, id: u32) -> bool {
        self.lock().terminals.contains_key(&id)
    }

    /// Terminal output: kept for late joiners and sent to every member. A member too far behind
    /// is closed; nobody waits for it. Says how many members it went to.
    pub fn output(&self, terminal: u32, bytes: &[u8]) -> usize {
        let mut st = self.lock();
        let Some(t) = st.terminals.get_mut(&terminal) else {
            return 0;
        };
        t.ring.extend(bytes);
        let over = t.ring.len().saturating_sub(TERMINAL_SCROLLBACK_BYTES);
        t.ring.drain(..over);
        let frame = bytes::Bytes::from(encode_terminal(terminal, bytes));
        for m in st.members.values() {
            m.out.push(Out::Binary(frame.clone()));
        }
        st.members.len()
    }

    fn member_role(st: &State, id: u32) -> Option<Role> {
        st.members.get(&id).map(|m| m.info.role)
    }

    /// Whether member `id` may type into terminals and use the desktop: drivers only, and only
    /// the controller while someone holds control.
    pub fn may_control(&self, id: u32) -> Result<(), Refusal> {
        Self::check_control(&self.lock(), id)
    }

    fn check_control(st: &State, id: u32) -> Result<(), Refusal> {
        let role = Self::member_role(st, id).ok_or("you left")?;
        if !role.can_drive() {
            return Err("viewers cannot type".into());
        }
        if let Some(c) = st.controller.filter(|c| *c != id) {
            let who = st
                .members
                .get(&c)
                .map_or("someone".to_string(), |m| m.info.name.clone());
            return Err(format!("{who} holds control; request it first"));
        }
        Ok(())
    }

    /// Terminal input from member `id` (see [`Self::may_control`]).
    pub fn input(&self, id: u32, terminal: u32, bytes: Vec<u8>) -> Result<(), Refusal> {
        let st = self.lock();
        Self::check_control(&st, id)?;
        let t = st
            .terminals
            .get(&terminal)
            .ok_or_else(|| format!("no terminal {terminal}"))?;
        t.upstream
            .try_send(Upstream::Input(bytes))
            .map_err(|_| "the terminal is not keeping up; try again".to_string())
    }

    /// Member `id` sees terminal `terminal` at `cols`×`rows`; the terminal takes the smallest
    /// size among drivers.
    pub fn resize(&self, id: u32, terminal: u32, cols: u16, rows: u16) -> Result<(), Refusal> {
        let mut st = self.lock();
        let role = Self::member_role(&st, id).ok_or("you left")?;
        if !role.can_drive() {
            return Err("viewers cannot resize".into());
        }
        if !st.terminals.contains_key(&terminal) {
            return Err(format!("no terminal {terminal}"));
        }
        tandem_protocol::limits::check_terminal_size(cols, rows)?;
        if let Some(m) = st.members.get_mut(&id) {
            m.sizes.insert(terminal, (cols, rows));
        }
        if recompute_sizes(&mut st) {
            self.publish_screens(&st);
        }
        Ok(())
    }

    /// What member `id` looks at.
    /// True when the change was held back (too soon after the last one sent): the caller then
    /// calls [`Hub::flush_presence`] once [`PRESENCE_MIN_INTERVAL`] has passed.
    pub fn presence(&self, id: u32, looking_at: Option<String>) -> bool {
        let mut st = self.lock();
        let Some(m) = st.members.get_mut(&id) else {
            return false;
        };
        let looking_at: Option<String> = looking_at.map(|l| l.chars().take(100).collect());
        if m.info.looking_at == looking_at {
            return false;
        }
        m.info.looking_at = looking_at.clone();
        // Nobody lists it: kept for when it is.
        if !m.listed {
            return false;
        }
        let now = std::time::Instant::now();
        if m.presence_sent
            .is_some_and(|t| now.duration_since(t) < PRESENCE_MIN_INTERVAL)
        {
            // One flush per held-back burst.
            let first = !m.presence_held;
            m.presence_held = true;
            return first;
        }
        m.presence_sent = Some(now);
        m.presence_held = false;
        Self::broadcast(&st, &WsServer::Presence { id, looking_at }, None);
        false
    }

    /// Sends member `id`'s newest presence if a change was held back.
    pub fn flush_presence(&self, id: u32) {
        let mut st = self.lock();
        let Some(m) = st.members.get_mut(&id) else {
            return;
        };
        if !m.presence_held || !m.listed {
            return;
        }
        m.presence_held = false;
        m.presence_sent = Some(std::time::Instant::now());
        let looking_at = m.info.looking_at.clone();
        Self::broadcast(&st, &WsServer::Presence { id, looking_at }, None);
    }

    /// Member `id` asks for control: granted if free, else the holder and owners are asked.
    pub fn request_control(&self, id: u32) -> Result<(), Refusal> {
        let mut st = self.lock();
        let role = Self::member_role(&st, id).ok_or("you left")?;
        if !role.can_drive() {
            return Err("viewers cannot take control".into());
        }
        match st.controller {
            None => {
                st.controller = Some(id);
                Self::broadcast_control(&st);
            }
            Some(c) if c == id => {}
            Some(c) => {
                let ask = WsServer::ControlRequested { by: id };
                for m in st
                    .members
                    .values()
                    .filter(|m| m.info.id == c || m.info.role == Role::Owner)
                {
                    m.out.send(&ask);
                }
            }
        }
        Ok(())
    }

    /// The holder (or an owner) hands control to `to`, a driver.
    pub fn grant_control(&self, id: u32, to: u32) -> Result<(), Refusal> {
        let mut st = self.lock();
        let role = Self::member_role(&st, id).ok_or("you left")?;
        if st.controller != Some(id) && role != Role::Owner {
            return Err(
                "only the participant holding control, or the owner, can hand it over".into(),
            );
        }
        match Self::member_role(&st, to) {
            Some(r) if r.can_drive() => {}
            Some(_) => return Err("viewers cannot hold control".into()),
            None => return Err(format!("no participant {to}")),
        }
        st.controller = Some(to);
        Self::broadcast_control(&st);
        Ok(())
    }

    /// The holder gives control back: every driver may type again.
    pub fn release_control(&self, id: u32) -> Result<(), Refusal> {
        let mut st = self.lock();
        if st.controller != Some(id) {
            return Err("you do not hold control".into());
        }
        st.controller = None;
        Self::broadcast_control(&st);
        Ok(())
    }

    /// An owner takes control.
    pub fn take_control(&self, id: u32) -> Result<(), Refusal> {
        let mut st = self.lock();
        if Self::member_role(&st, id) != Some(Role::Owner) {
            return Err("only the owner can take control".into());
        }
        st.controller = Some(id);
        Self::broadcast_control(&st);
        Ok(())
    }

    /// How many members came through share link `jti` without an account.
    pub fn guests_of(&self, jti: &str) -> usize {
        self.lock()
            .members
            .values()
            .filter(|m| m.info.user_id.is_none() && m.jti.as_deref() == Some(jti))
            .count()
    }

    /// Closes every member `which(person, share link)` picks.
    pub fn close_if(&self, which: impl Fn(Option<tandem_protocol::UserId>, Option<&str>) -> bool) {
        let st = self.lock();
        for m in st
            .members
            .values()
            .filter(|m| which(m.info.user_id, m.jti.as_deref()))
        {
            m.out.close(close::FORBIDDEN);
        }
    }
}

impl Hub {
    /// Queues `msg` (serialised once, shared) to every member but `except`.
    fn broadcast(st: &State, msg: &WsServer, except: Option<u32>) {
        let json = bytes::Bytes::from(serde_json::to_vec(msg).unwrap_or_default());
        for m in st.members.values().filter(|m| Some(m.info.id) != except) {
            m.out.push(Out::Json(json.clone()));
        }
    }

    fn broadcast_control(st: &State) {
        Self::broadcast(
            st,
            &WsServer::Control {
                controller: st.controller,
            },
            None,
        );
    }

    fn publish_screens(&self, st: &State) {
        let msg = WsServer::Terminals {
            terminals: st.terminals.values().map(|t| t.info.clone()).collect(),
        };
        self.screens
            .send_replace(serde_json::to_vec(&msg).unwrap_or_default().into());
    }
}

/// Sets each terminal to the smallest size any driver reported; true if one changed.
fn recompute_sizes(st: &mut State) -> bool {
    let mut changed = false;
    let ids: Vec<u32> = st.terminals.keys().copied().collect();
    for tid in ids {
        let min = st
            .members
            .values()
            .filter(|m| m.info.role.can_drive())
            .filter_map(|m| m.sizes.get(&tid))
            .fold(None, |acc: Option<(u16, u16)>, &(c, r)| {
                Some(acc.map_or((c, r), |(ac, ar)| (ac.min(c), ar.min(r))))
            });
        if let (Some((cols, rows)), Some(t)) = (min, st.terminals.get_mut(&tid))
            && (t.info.cols, t.info.rows) != (cols, rows)
        {
            t.info.cols = cols;
            t.info.rows = rows;
            let _ = t.upstream.try_send(Upstream::Resize { cols, rows });
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member; its hello (stood in for by `control`, the hub does not read it) is taken.
    fn join(hub: &Hub, role: Role) -> (Participant, Inbox) {
        let (out, mut inbox) = outbox();
        let (me, _) = hub.join("p".into(), None, role, None, out, |_, _, c, _, _| {
            WsServer::Control { controller: c }
        });
        assert_eq!(texts(&mut inbox).len(), 1, "the hello");
        (me, inbox)
    }

    fn texts(inbox: &mut Inbox) -> Vec<WsServer> {
        let mut v = Vec::new();
        while let Ok(out) = inbox.rx.try_recv() {
            inbox.written(&out);
            match out {
                Out::Text(t) => v.push(serde_json::from_str(&t).expect("a server message")),
                Out::Json(b) => v.push(serde_json::from_slice(&b).expect("a server message")),
                Out::Binary(_) => {}
            }
        }
        v
    }

    #[test]
    fn a_crowd_is_a_count_past_the_listed_viewers_and_a_freed_place_goes_to_the_longest_waiting() {
        let hub = Hub::default();
        let (_, mut first) = join(&hub, Role::Owner);
        let mut others = Vec::new();
        for _ in 0..300 {
            others.push(join(&hub, Role::Viewer));
        }
        // One `joined` per listed viewer, none for the crowd beyond: a message per newcomer
        // to every member would be N² (45,000 here; 2 million for 2,000 viewers).
        let got = texts(&mut first);
        let ids: Vec<u32> = got
            .iter()
            .map(|m| match m {
                WsServer::Joined { participant } => participant.id,
                other => panic!("expected joined, got {other:?}"),
            })
            .collect();
        let want: Vec<u32> = others[..LISTED_VIEWERS].iter().map(|(p, _)| p.id).collect();
        assert_eq!(ids, want, "the first listed viewers, in join order");
        // The crowd is a count, the newest one (a watch each writer reads at its pace).
        let mut audience = hub.audience.subscribe();
        assert_eq!(*audience.borrow_and_update(), (300 - LISTED_VIEWERS) as u32);
        // The last joiner's hello lists the owner and the listed viewers, not itself, and
        // counts it in the audience.
        let mut hello = None;
        let (out, _late) = outbox();
        hub.join(
            "late".into(),
            None,
            Role::Viewer,
            None,
            out,
            |_, ps, c, _, n| {
                hello = Some((ps.len(), n));
                WsServer::Control { controller: c }
            },
        );
        assert_eq!(
            hello,
            Some((1 + LISTED_VIEWERS, (300 - LISTED_VIEWERS + 1) as u32))
        );
        assert!(
            texts(&mut first).is_empty(),
            "nothing per newcomer past the list"
        );
        // Drivers are always listed, whatever the crowd.
        let (driver, _) = join(&hub, Role::Driver);
        let got = texts(&mut first);
        assert_eq!(
            got,
            vec![WsServer::Joined {
                participant: driver
            }]
        );
        // A listed viewer leaving frees its place for the longest-waiting unlisted one.
        texts(&mut first);
        let (gone, _) = &others[0];
        hub.leave(gone.id);
        let got = texts(&mut first);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], WsServer::Left { id: gone.id });
        let WsServer::Joined { participant } = &got[1] else {
            panic!("expected joined, got {:?}", got[1])
        };
        assert_eq!(participant.id, others[LISTED_VIEWERS].0.id);
        assert_eq!(*audience.borrow_and_update(), (300 - LISTED_VIEWERS) as u32);
        // An unlisted viewer leaving only changes the count; its presence reaches nobody.
        let (quiet, mut quiet_inbox) = others.pop().unwrap();
        texts(&mut quiet_inbox);
        assert!(!hub.presence(quiet.id, Some("terminal:1".into())));
        hub.leave(quiet.id);
        assert!(texts(&mut first).is_empty());
        assert_eq!(
            *audience.borrow_and_update(),
            (300 - LISTED_VIEWERS - 1) as u32
        );
    }

    #[test]
    fn leaving_with_control_frees_it_and_presence_floods_are_throttled() {
        let hub = Hub::default();
        let (owner, _owner_inbox) = join(&hub, Role::Owner);
        let (driver, _) = join(&hub, Role::Driver);
        let (_, mut viewer) = join(&hub, Role::Viewer);
        hub.take_control(owner.id).unwrap();
        hub.grant_control(owner.id, driver.id).unwrap();
        texts(&mut viewer);
        hub.leave(driver.id);
        assert_eq!(
            texts(&mut viewer),
            vec![
                WsServer::Left { id: driver.id },
                WsServer::Control { controller: None }
            ]
        );
        let mut flushes = 0;
        for i in 0..1000 {
            if hub.presence(owner.id, Some(format!("terminal:{i}"))) {
                flushes += 1;
            }
        }
        let sent = texts(&mut viewer);
        assert!(
            !sent.is_empty() && sent.len() < 10,
            "{} presence messages for a flood of 1000",
            sent.len()
        );
        assert!(
            flushes >= 1 && flushes <= sent.len(),
            "one flush per held-back burst"
        );
        // The newest is recorded all the same (joiners see it) and owed to the others: the
        // flush after the interval sends it.
        let (ps, _, _) = hub.snapshot();
        let o = ps.iter().find(|p| p.id == owner.id).unwrap();
        assert_eq!(o.looking_at.as_deref(), Some("terminal:999"));
        hub.flush_presence(owner.id);
        assert_eq!(
            texts(&mut viewer),
            vec![WsServer::Presence {
                id: owner.id,
                looking_at: Some("terminal:999".into())
            }]
        );
        hub.flush_presence(owner.id);
        assert!(texts(&mut viewer).is_empty(), "nothing owed twice");
        // An unchanged presence is not news.
        assert!(
            !hub.presence(owner.id, Some("terminal:999".into())),
            "nothing held back"
        );
        assert!(texts(&mut viewer).is_empty());
    }
}
