//! The fork-join pool of the host kernels' parallel loops (projections, the lm_head's
//! pick, attention).
//!
//! A decoding step makes about 200 parallel loops of 10-100 µs each. On rayon's pool, the
//! worker went to sleep between them (after yielding to the OS), and the thread that woke
//! it paid a futex call each time. The main thread then did about two thirds of the work
//! while the worker woke up. Measured on the 2-core VM (benches/README.md, "Kernels on a
//! spinning pool").
//!
//! Here the workers spin on an atomic while loops keep coming, and park after [`SPIN`]
//! without one. Every wait yields its CPU after a few spins ([`pause`]), so that on a
//! machine with more busy threads than cores it does not hold the core the thread it
//! waits for needs. Every loop is a set of tasks `0..n`, claimed one at a time from an atomic
//! counter by the caller and every worker. The caller returns once every worker has finished
//! the loop. A task computes the same thing whichever thread runs it, so results do not
//! depend on the split.
//!
//! One loop runs at a time. A caller that finds the pool busy (another thread's loop, or a
//! loop started inside a task) runs its tasks itself, in order.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a worker spins without a loop before it parks.
const SPIN: Duration = Duration::from_millis(2);
/// Busy-wait rounds before a wait starts yielding its CPU at each round.
const SPINS_BEFORE_YIELD: u32 = 200;

/// One round of a wait: a spin at first, then a yield. On an oversubscribed machine (more
/// busy threads than cores: two toki processes on two cores) the thread waited for may be
/// descheduled, and a wait that only spins holds the CPU it needs until the scheduler's
/// time slice ends, milliseconds for a loop of microseconds. A yield with nothing else
/// to run returns at once.
fn pause(rounds: &mut u32) {
    if *rounds < SPINS_BEFORE_YIELD {
        *rounds += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// One loop: tasks `0..n` of `f`.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    n: usize,
}

struct Shared {
    /// Bumped once per loop; a worker runs each epoch's loop once.
    epoch: AtomicUsize,
    /// The current loop (valid from its epoch's start until `pending` reaches 0).
    job: AtomicPtr<Job<'static>>,
    /// The next task to claim.
    next: AtomicUsize,
    /// Workers that have not finished the current loop.
    pending: AtomicUsize,
    /// Per worker: parked (the caller must unpark it).
    parked: Vec<AtomicBool>,
    /// A task panicked on a worker (the caller panics in turn).
    panicked: AtomicBool,
}

struct Pool {
    shared: Arc<Shared>,
    workers: Vec<Thread>,
    /// Held by the thread whose loop runs.
    busy: Mutex<()>,
}

/// The pool: `threads - 1` workers (the caller is the other thread), `RAYON_NUM_THREADS`
/// threads, else one per CPU.
fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = super::configured_threads();
        let shared = Arc::new(Shared {
            epoch: AtomicUsize::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            next: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            parked: (1..threads).map(|_| AtomicBool::new(false)).collect(),
            panicked: AtomicBool::new(false),
        });
        let workers = (1..threads)
            .filter_map(|w| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("toki-kernel-{w}"))
                    .spawn(move || work(&shared, w - 1))
                    .ok()
                    .map(|h| h.thread().clone())
            })
            .collect::<Vec<_>>();
        // A worker that failed to start would never finish a loop: no workers then.
        let workers = if workers.len() == threads - 1 {
            workers
        } else {
            tracing::warn!("kernel pool: a worker thread failed to start; running on one thread");
            vec![]
        };
        Pool {
            shared,
            workers,
            busy: Mutex::new(()),
        }
    })
}

/// Threads a loop runs on (the caller included).
pub(crate) fn threads() -> usize {
    pool().workers.len() + 1
}

/// Runs `f(0) .. f(n - 1)` on the pool's threads and the caller's, and returns when all
/// have run.
pub(crate) fn run(n: usize, f: &(dyn Fn(usize) + Sync)) {
    let pool = pool();
    if n < 2 || pool.workers.is_empty() {
        return (0..n).for_each(f);
    }
    // The lock guards no data: a loop whose task panicked leaves it usable.
    let guard = match pool.busy.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return (0..n).for_each(f),
    };
    let s = &*pool.shared;
    let job = Job { f, n };
    // SAFETY: the pointer is cleared below before `job` goes out of scope, and workers read
    // it only between this loop's start and their `pending` decrement, which this function
    // waits for.
    let ptr = &job as *const Job<'_> as *mut Job<'static>;
    s.job.store(ptr, SeqCst);
    s.next.store(0, SeqCst);
    s.pending.store(pool.workers.len(), SeqCst);
    s.epoch.fetch_add(1, SeqCst);
    for (w, t) in pool.workers.iter().enumerate() {
        if s.parked[w].load(SeqCst) {
            t.unpark();
        }
    }
    // Waits for the workers and clears the loop even if a task of the caller panics.
    let finish = Finish(s);
    claim(s, &job);
    drop(finish);
    drop(guard);
    if s.panicked.swap(false, SeqCst) {
        panic!("a kernel task panicked on a pool thread");
    }
}

/// On drop: waits until every worker has finished the current loop, then clears it.
struct Finish<'a>(&'a Shared);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        let mut rounds = 0;
        while self.0.pending.load(SeqCst) != 0 {
            pause(&mut rounds);
        }
        self.0.job.store(std::ptr::null_mut(), SeqCst);
    }
}

/// `[f(0, chunk 0), f(1, chunk 1), ..]` for the chunks of `len` items of `items` (the last
/// may be shorter), computed on the pool.
pub(crate) fn map_chunks<T: Send, R: Send>(
    items: &mut [T],
    len: usize,
    f: impl Fn(usize, &mut [T]) -> R + Sync,
) -> Vec<R> {
    let (total, len) = (items.len(), len.max(1));
    let n = total.div_ceil(len);
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let (base, slots) = (SendPtr(items.as_mut_ptr()), SendPtr(out.as_mut_ptr()));
    run(n, &|i| {
        let start = i * len;
        let end = (start + len).min(total);
        // SAFETY: task i alone touches items start..end and result slot i (tasks do not
        // overlap), and both are borrowed mutably until `run` returns, after every task.
        let (chunk, slot) = unsafe {
            (
                std::slice::from_raw_parts_mut(base.get().add(start), end - start),
                &mut *slots.get().add(i),
            )
        };
        *slot = Some(f(i, chunk));
    });
    out.into_iter().flatten().collect()
}

/// `f(i, chunk i)` for the chunks of `len` items of `items`, on the pool.
pub(crate) fn for_each_chunk<T: Send>(
    items: &mut [T],
    len: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    map_chunks(items, len, f);
}

/// `[f(0), .., f(n - 1)]`, computed on the pool.
pub(crate) fn map<R: Send>(n: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    map_chunks(&mut vec![(); n], 1, |i, _| f(i))
}

/// A pointer tasks share; each task writes only its own part of what it points to.
struct SendPtr<T>(*mut T);
// SAFETY: used only by `map_chunks`, whose tasks write disjoint ranges.
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    fn get(&self) -> *mut T {
        self.0
    }
}

/// Claims and runs tasks of `job` until none are left.
fn claim(s: &Shared, job: &Job<'_>) {
    loop {
        let i = s.next.fetch_add(1, SeqCst);
        if i >= job.n {
            return;
        }
        (job.f)(i);
    }
}

/// A worker: waits for each loop (spinning, then parked), takes part, reports done.
fn work(s: &Shared, w: usize) {
    // The epoch the pool starts at (not a load: the first loop may have begun already).
    let mut seen = 0;
    loop {
        let mut since = Instant::now();
        let (mut spins, mut rounds) = (0u32, 0);
        while s.epoch.load(SeqCst) == seen {
            pause(&mut rounds);
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) && since.elapsed() > SPIN {
                s.parked[w].store(true, SeqCst);
                if s.epoch.load(SeqCst) == seen {
                    std::thread::park();
                }
                s.parked[w].store(false, SeqCst);
                since = Instant::now();
            }
        }
        seen = s.epoch.load(SeqCst);
        // SAFETY: a new epoch's job is set before the epoch moves and stays valid until
        // this worker decrements `pending` (the caller waits for that).
        if let Some(job) = unsafe { s.job.load(SeqCst).as_ref() } {
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| claim(s, job)));
            if ran.is_err() {
                s.panicked.store(true, SeqCst);
            }
        }
        s.pending.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_and_chunks_are_disjoint() {
        for n in [0, 1, 2, 7, 64, 1000] {
            let counts: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            run(n, &|i| {
                counts[i].fetch_add(1, SeqCst);
            });
            assert!(counts.iter().all(|c| c.load(SeqCst) == 1), "n = {n}");
            let mut v = vec![0usize; n];
            for_each_chunk(&mut v, 3, |i, c| c.iter_mut().for_each(|x| *x += i + 1));
            assert!(
                v.iter().enumerate().all(|(j, &x)| x == j / 3 + 1),
                "n = {n}"
            );
            assert_eq!(map(n, |i| i * i), (0..n).map(|i| i * i).collect::<Vec<_>>());
        }
    }

    /// Loops from several threads at once, and a loop inside a task: each runs whole
    /// (on the pool or on its caller's thread).
    #[test]
    fn concurrent_and_nested_loops_complete() {
        std::thread::scope(|scope| {
            for t in 0..4 {
                scope.spawn(move || {
                    for round in 0..200 {
                        let sums = map(9, |i| map(5, |j| i * j + t + round).iter().sum::<usize>());
                        let want: Vec<usize> = (0..9)
                            .map(|i| (0..5).map(|j| i * j + t + round).sum())
                            .collect();
                        assert_eq!(sums, want);
                    }
                });
            }
        });
    }

    /// A worker parked after a pause takes part again when a loop comes.
    #[test]
    fn loops_after_a_pause_complete() {
        assert_eq!(map(4, |i| i + 1), vec![1, 2, 3, 4]);
        std::thread::sleep(SPIN * 3);
        assert_eq!(map(4, |i| i + 1), vec![1, 2, 3, 4]);
    }
}
