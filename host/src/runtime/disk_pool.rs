//! The pool of spare disks: copies of a size's template made ahead of need, attached to a loop
//! device and mounted detached ([`loop_device`]), so a start costs a rename and a `move_mount`.
//! How many of each size: at least [`SPARES`], and as many as the busiest [`BURST_SPAN`] of
//! the last [`DEMAND_WINDOW`] asked for (up to [`MAX_SPARES`] of all sizes), so a burst like
//! the last one finds its disks made. They are made one after another while starts go on
//! ([`refill`]). A pool grown for a burst shrinks back once that burst has left the window
//! ([`trim_later`]): one timer per size, set for the moment the demand can next fall, and none while the
//! pool is at its least.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{copy_sparse, loop_device};
use crate::Error;

/// Disks of each size kept ready for the next starts: copied from the template, attached to a
/// loop device and mounted detached ([`loop_device`]), so a start renames one and moves its
/// mount into place.
pub const SPARES: usize = 2;

/// Most spares of all sizes together, whatever the demand (each holds a loop device and a
/// mounted filesystem: about 1 MiB of kernel memory).
pub const MAX_SPARES: usize = 64;
/// How far back the starts count towards the pool's size.
pub const DEMAND_WINDOW: Duration = Duration::from_secs(600);
/// The span a burst is counted over: the pool holds as many as the most disks asked for within
/// one such span in the last [`DEMAND_WINDOW`].
pub const BURST_SPAN: Duration = Duration::from_secs(10);

/// When new disks of one size were asked for (the last `window`: [`DEMAND_WINDOW`] unless
/// [`keep_grown_pool_for`] says otherwise).
struct Demand {
    asked: VecDeque<Instant>,
    window: Duration,
}

impl Demand {
    fn new(window: Duration) -> Self {
        Self {
            asked: VecDeque::new(),
            window,
        }
    }

    fn ask(&mut self, at: Instant) {
        self.forget(at);
        if self.asked.len() >= 4 * MAX_SPARES * 60 {
            self.asked.pop_front();
        }
        self.asked.push_back(at);
    }

    fn forget(&mut self, now: Instant) {
        while self
            .asked
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > self.window)
        {
            self.asked.pop_front();
        }
    }

    /// How many spares to keep: the most asked for within one [`BURST_SPAN`], within bounds.
    fn wanted(&mut self, now: Instant) -> usize {
        self.forget(now);
        let mut most = 0;
        let mut from = 0;
        for (i, t) in self.asked.iter().enumerate() {
            while t.duration_since(self.asked[from]) > BURST_SPAN {
                from += 1;
            }
            most = most.max(i + 1 - from);
        }
        most.clamp(SPARES, MAX_SPARES)
    }

    /// When to look again at the pool's size: once the oldest start counted, and those of the
    /// [`BURST_SPAN`] after it, have left the window (the span is a deliberate delay: one
    /// look per span of starts, not one per start). `None` when no start counts (the pool
    /// wants its least now) or the window is too long to say.
    fn next_fall(&mut self, now: Instant) -> Option<Instant> {
        self.forget(now);
        let front = *self.asked.front()?;
        front.checked_add(self.window + BURST_SPAN + Duration::from_millis(1))
    }
}

static DEMAND: Mutex<BTreeMap<PathBuf, Demand>> = Mutex::new(BTreeMap::new());

/// How long starts count towards the pool, by templates directory, where not
/// [`DEMAND_WINDOW`].
static WINDOWS: Mutex<BTreeMap<PathBuf, Duration>> = Mutex::new(BTreeMap::new());

/// `f` on the demand for the spares in `dir`.
fn with_demand<R>(dir: &Path, f: impl FnOnce(&mut Demand) -> R) -> R {
    let mut all = DEMAND.lock().unwrap_or_else(|p| p.into_inner());
    let d = all.entry(dir.to_path_buf()).or_insert_with(|| {
        let windows = WINDOWS.lock().unwrap_or_else(|p| p.into_inner());
        let window = dir.parent().and_then(|t| windows.get(t).copied());
        Demand::new(window.unwrap_or(DEMAND_WINDOW))
    });
    f(d)
}

/// Starts count towards the pools of the disks under `templates` for `window` instead of
/// [`DEMAND_WINDOW`]: a pool grown for a burst goes back to [`SPARES`] about that long after
/// the burst (and a [`BURST_SPAN`]).
pub fn keep_grown_pool_for(templates: &Path, window: Duration) {
    WINDOWS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(templates.to_path_buf(), window);
    let mut all = DEMAND.lock().unwrap_or_else(|p| p.into_inner());
    for (dir, d) in all.iter_mut() {
        if dir.parent() == Some(templates) {
            d.window = window;
        }
    }
}

/// A start asks for a disk from the spares in `dir` now.
pub(super) fn ask(dir: &Path) {
    with_demand(dir, |d| d.ask(Instant::now()));
}

/// How many spares of `bytes` are kept for the demand seen now: [`SPARES`] at least.
pub fn spares_wanted(templates: &Path, bytes: i64) -> usize {
    with_demand(&spares_dir(templates, bytes), |d| d.wanted(Instant::now()))
}

/// Where the spare copies of the template of `bytes` wait.
pub fn spares_dir(templates: &Path, bytes: i64) -> PathBuf {
    templates.join(format!("spare-{bytes}"))
}

/// A spare disk, mounted nowhere yet; dropping it unmounts it and frees its loop device.
struct Ready {
    image: PathBuf,
    mount: OwnedFd,
}

/// This process's ready spares, by [`spares_dir`]. Only the process that mounted a spare may
/// hand it out: its mount lives in that process's file descriptor.
static READY: Mutex<BTreeMap<PathBuf, Vec<Ready>>> = Mutex::new(BTreeMap::new());

fn ready() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, Vec<Ready>>> {
    READY.lock().unwrap_or_else(|p| p.into_inner())
}

/// The images of the spare disks of `bytes` ready now (attached and mounted, in this process).
pub fn spares(templates: &Path, bytes: i64) -> Vec<PathBuf> {
    ready()
        .get(&spares_dir(templates, bytes))
        .map(|r| r.iter().map(|r| r.image.clone()).collect())
        .unwrap_or_default()
}

/// How many runtimes use the disk templates under each directory: spares are kept only while
/// one does.
static OWNERS: Mutex<BTreeMap<PathBuf, usize>> = Mutex::new(BTreeMap::new());

fn owners() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, usize>> {
    OWNERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A runtime gives its workspaces disks from `templates` (until [`let_go`]).
/// The first one in this process clears what a process that died left in the spares
/// directories (staging mounts, images).
pub fn hold(templates: &Path) {
    let first = {
        let mut o = owners();
        let n = o.entry(templates.to_path_buf()).or_default();
        *n += 1;
        *n == 1
    };
    if first {
        let dirs = std::fs::read_dir(templates).into_iter().flatten().flatten();
        for dir in dirs.filter(|d| d.file_name().to_string_lossy().starts_with("spare-")) {
            // Not where a refill of an earlier runtime here is still making one.
            let refilling = REFILLING.lock().unwrap_or_else(|p| p.into_inner());
            if !refilling.contains(&dir.path()) {
                sweep(&dir.path());
            }
        }
    }
}

/// Removes what is left in spares directory `dir`: staging points (unmounted), images, and loop
/// devices an earlier process attached to them but died before mounting (nothing clears those).
fn sweep(dir: &Path) {
    loop_device::detach_backed_by(dir);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().extension().is_some_and(|x| x == "staging") {
            loop_device::clear_staging(&e.path());
        } else {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A runtime that used `templates` goes away; the last one's ready spares are unmounted (and a
/// refill still running keeps none).
pub fn let_go(templates: &Path) {
    let gone: Vec<Vec<Ready>> = {
        // Held while the spares are drained: a refill keeps a spare only under this lock.
        let mut o = owners();
        match o.get_mut(templates) {
            Some(n) if *n > 1 => {
                *n -= 1;
                return;
            }
            _ => {
                o.remove(templates);
            }
        }
        let mut r = ready();
        let dirs: Vec<PathBuf> = r
            .keys()
            .filter(|d| d.starts_with(templates))
            .cloned()
            .collect();
        dirs.iter().filter_map(|d| r.remove(d)).collect()
    };
    for spare in gone.into_iter().flatten() {
        let _ = std::fs::remove_file(&spare.image);
    }
}

/// Takes a ready spare of `bytes`: its image renamed to `to`, its filesystem mounted at
/// `at`. False when there is none (or it is on another filesystem).
pub(super) fn take_spare(templates: &Path, bytes: i64, to: &Path, at: &Path) -> bool {
    let dir = spares_dir(templates, bytes);
    loop {
        let Some(spare) = ready().get_mut(&dir).and_then(Vec::pop) else {
            return false;
        };
        // A spare that cannot move is dropped (unmounted); the next one may.
        if std::fs::rename(&spare.image, to).is_err() {
            let _ = std::fs::remove_file(&spare.image);
            continue;
        }
        match loop_device::place(&spare.mount, at) {
            Ok(()) => return true,
            Err(e) => {
                tracing::warn!("placing a spare workspace disk: {e}");
                drop(spare);
                let _ = std::fs::remove_file(to);
                return false;
            }
        }
    }
}

/// The spares directories a refill is under way for, in this process.
static REFILLING: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// Makes spare disks of `template` until as many as the demand wants ([`spares_wanted`]) are
/// ready, in the background; one refill per size at a time, one disk after another, whether or
/// not starts are under way (under a steady stream of starts a pool that waited for a pause
/// would stay empty, and each start would make its own disk); all sizes together hold at most
/// [`MAX_SPARES`]. A pool grown for a burst is kept (the next burst may be like it) until that
/// burst leaves the window ([`trim_later`]). What an earlier process left in the spares
/// directory is removed first.
pub(super) fn refill(templates: &Path, bytes: i64, template: PathBuf) {
    static SWEPT: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
    let refilling = || REFILLING.lock().unwrap_or_else(|p| p.into_inner());
    let dir = spares_dir(templates, bytes);
    if !refilling().insert(dir.clone()) {
        return;
    }
    /// Ends this size's refill however its task ends (a runtime shut down cancels it).
    struct Refilling(PathBuf);
    impl Drop for Refilling {
        fn drop(&mut self) {
            REFILLING
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.0);
        }
    }
    let templates = templates.to_path_buf();
    // Made before the task: a task dropped before it first runs still ends the refill.
    let refilling_guard = Refilling(dir.clone());
    tokio::spawn(async move {
        let refilling_guard = refilling_guard;
        let made = std::fs::create_dir_all(&dir);
        if SWEPT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(dir.clone())
        {
            sweep(&dir);
        }
        if made.is_err() {
            return;
        }
        loop {
            // Decided under the refill's own lock: a start that asks for a refill after this
            // finds either the refill going on or none (and starts one).
            {
                let mut r = refilling();
                let want = with_demand(&dir, |d| d.wanted(Instant::now()));
                let (have, all) = {
                    let ready = ready();
                    let all: usize = ready.values().map(Vec::len).sum();
                    (ready.get(&dir).map_or(0, Vec::len), all)
                };
                if !owners().contains_key(&templates)
                    || have >= want
                    || (have >= SPARES && all >= MAX_SPARES)
                {
                    r.remove(&dir);
                    drop(r);
                    std::mem::forget(refilling_guard);
                    if have > SPARES {
                        trim_later(&templates, dir);
                    }
                    return;
                }
            };
            let name = uuid::Uuid::new_v4().simple().to_string();
            let (tmp, image) = (
                dir.join(format!(".{name}.new")),
                dir.join(format!("{name}.img")),
            );
            let (t, i) = (template.clone(), image.clone());
            let spare = tokio::task::spawn_blocking(move || {
                copy_sparse(&t, &tmp)?;
                std::fs::rename(&tmp, &i)?;
                loop_device::open(&i)
            })
            .await
            .map_err(|e| Error::Internal(format!("making a spare disk: {e}")))
            .and_then(|r| r);
            match spare {
                Ok(mount) => {
                    // Kept only while its runtime is there ([`let_go`] drains under this lock).
                    let owners = owners();
                    if owners.contains_key(&templates) {
                        ready()
                            .entry(dir.clone())
                            .or_default()
                            .push(Ready { image, mount });
                    } else {
                        drop(owners);
                        drop(mount);
                        let _ = std::fs::remove_file(&image);
                    }
                }
                Err(e) => {
                    tracing::warn!("making a spare workspace disk: {e}");
                    let _ = std::fs::remove_file(dir.join(format!(".{name}.new")));
                    let _ = std::fs::remove_file(&image);
                    // What it made before goes back once its burst has passed, as always.
                    if ready().get(&dir).map_or(0, Vec::len) > SPARES {
                        trim_later(&templates, dir.clone());
                    }
                    return;
                }
            }
        }
    });
}

/// The spares directories whose trim waits for its moment, in this process.
static TRIMMING: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// True while a trim of the pool of `bytes` under `templates` is under way (a pool above its
/// least has one; it ends once the pool is back at [`SPARES`], and nothing then wakes for it).
pub fn trim_pending(templates: &Path, bytes: i64) -> bool {
    TRIMMING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&spares_dir(templates, bytes))
}

/// Gives back the spares in `dir` beyond what the demand wants, each time it can next fall
/// ([`Demand::next_fall`]), until the pool is at its least or its runtime is gone: one timer
/// per size at a time, none while the pool is at [`SPARES`]. The newest spares go (a start
/// takes the newest too); each is unmounted and its loop device freed.
fn trim_later(templates: &Path, dir: PathBuf) {
    if !TRIMMING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(dir.clone())
    {
        return;
    }
    /// Ends this size's trim however its task ends (a runtime shut down cancels it).
    struct Trimming(PathBuf);
    impl Drop for Trimming {
        fn drop(&mut self) {
            TRIMMING
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.0);
        }
    }
    let guard = Trimming(dir);
    let templates = templates.to_path_buf();
    tokio::spawn(async move {
        let guard = guard;
        let dir = &guard.0;
        loop {
            if let Some(at) = with_demand(dir, |d| d.next_fall(Instant::now())) {
                tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
            }
            let want = with_demand(dir, |d| d.wanted(Instant::now()));
            let (extra, left) = {
                let mut ready = ready();
                match ready.get_mut(dir) {
                    Some(spares) => (spares.split_off(want.min(spares.len())), spares.len()),
                    // Its runtime went ([`let_go`] took them all).
                    None => (Vec::new(), 0),
                }
            };
            if !extra.is_empty() {
                let gone = extra.len();
                // Unmounting waits for the filesystem: not on the runtime's threads.
                let _ = tokio::task::spawn_blocking(move || {
                    for spare in extra {
                        let _ = std::fs::remove_file(&spare.image);
                        drop(spare);
                    }
                })
                .await;
                tracing::debug!(
                    dir = %dir.display(),
                    gone,
                    left,
                    "spare workspace disks given back"
                );
            }
            // Ended under the trims' lock, counted again there: a refill that grows the pool
            // meanwhile either finds this trim going on (which then looks again) or none (and
            // starts one).
            let mut trimming = TRIMMING.lock().unwrap_or_else(|p| p.into_inner());
            let left = ready().get(dir).map_or(0, Vec::len);
            if left <= SPARES || !owners().contains_key(&templates) {
                trimming.remove(dir);
                drop(trimming);
                std::mem::forget(guard);
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_is_sized_to_the_busiest_span_of_recent_starts() {
        let t0 = Instant::now();
        let mut d = Demand::new(DEMAND_WINDOW);
        assert_eq!(d.wanted(t0), SPARES, "no demand: the least");
        // 30 starts within two seconds, then 5 spread over a minute.
        for i in 0..30 {
            d.ask(t0 + Duration::from_millis(i * 60));
        }
        for i in 0..5 {
            d.ask(t0 + Duration::from_secs(20 + i * 12));
        }
        let now = t0 + Duration::from_secs(80);
        assert_eq!(d.wanted(now), 30, "the burst's size");
        // Once the burst is older than the window, only the spread starts count.
        let later = t0 + DEMAND_WINDOW + Duration::from_secs(5);
        assert_eq!(d.wanted(later), SPARES);
        // However busy, the pool stays bounded.
        for i in 0..(MAX_SPARES as u64 * 3) {
            d.ask(later + Duration::from_millis(i));
        }
        assert_eq!(d.wanted(later + Duration::from_secs(1)), MAX_SPARES);
    }

    #[test]
    fn the_pool_can_next_fall_once_the_oldest_span_has_left_the_window() {
        let t0 = Instant::now();
        let window = Duration::from_secs(120);
        let mut d = Demand::new(window);
        assert_eq!(d.next_fall(t0), None, "no demand: nothing to wait for");
        for i in 0..8 {
            d.ask(t0 + Duration::from_millis(i * 100));
        }
        // A second, smaller burst a minute and a half later, within the window.
        for i in 0..3 {
            d.ask(t0 + Duration::from_secs(90) + Duration::from_millis(i));
        }
        let now = t0 + Duration::from_secs(91);
        assert_eq!(d.wanted(now), 8);
        let fall = d.next_fall(now).expect("the first burst still counts");
        assert!(
            fall > t0 + window + BURST_SPAN,
            "not before the span has left"
        );
        assert!(fall < t0 + window + BURST_SPAN + Duration::from_secs(1));
        assert_eq!(
            d.wanted(fall),
            3,
            "the first burst is gone, the second counts"
        );
        let next = d.next_fall(fall).expect("the second burst still counts");
        assert!(next > t0 + Duration::from_secs(90) + window + BURST_SPAN);
        assert_eq!(d.wanted(next), SPARES);
        assert_eq!(d.next_fall(next), None, "at its least: no timer");
    }
}
