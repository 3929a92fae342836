//! Event files as the kernel's uverbs delivers them (Linux
//! `drivers/infiniband/core/uverbs_main.c`: `ib_uverbs_event_read`,
//! `ib_uverbs_event_poll`): a completion channel's `read()` returns one
//! `ib_uverbs_comp_event_desc` (8 bytes), the async file's one
//! `ib_uverbs_async_event_desc` (16 bytes); a buffer shorter than an event is EINVAL;
//! an empty queue is EAGAIN with `O_NONBLOCK` and a wait otherwise; `poll`/`epoll`
//! report POLLIN while events are queued. Reading an event counts it for the object
//! it names (what DESTROY_CQ / DESTROY_QP report back).
//!
//! Each file is an eventfd (readable while the queue is non-empty), so `poll`,
//! `epoll`, `fcntl(O_NONBLOCK)` and `close` act on a real descriptor.
//!
//! Completion events come from the device's completion EQ ([`crate::nic::Nic`]): a
//! thread waits on its interrupt eventfd, and routes each event by CQ number to the
//! channel the CQ was created with.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::nic::Nic;
use crate::{real, Errno};

/// One queued event.
struct Event {
    bytes: [u8; 16],
    /// Counted when read.
    counter: Option<Arc<AtomicU32>>,
    /// The CQ a completion event names (to drop it when the CQ is destroyed).
    cqn: Option<u32>,
}

struct Inner {
    fd: i32,
    queue: VecDeque<Event>,
    /// Whether the eventfd's counter is nonzero.
    signalled: bool,
}

/// An event file.
pub struct EventFile {
    rec: usize,
    inner: Mutex<Inner>,
}

impl EventFile {
    /// A new file whose events are `rec` bytes (8 or 16); its descriptor.
    pub fn new(rec: usize) -> Result<Arc<EventFile>, Errno> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Errno::last());
        }
        Ok(Arc::new(EventFile {
            rec,
            inner: Mutex::new(Inner {
                fd,
                queue: VecDeque::new(),
                signalled: false,
            }),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The descriptor (-1 once closed).
    pub fn fd(&self) -> i32 {
        self.lock().fd
    }

    fn push(&self, e: Event) {
        let mut g = self.lock();
        if g.fd < 0 {
            return;
        }
        g.queue.push_back(e);
        if !g.signalled {
            let one = 1u64;
            // SAFETY: an 8-byte write of our own eventfd.
            unsafe { real::write(g.fd, (&one as *const u64).cast(), 8) };
            g.signalled = true;
        }
    }

    /// Queues a completion event for the CQ whose `user_handle` is `cq_handle`.
    pub fn push_comp(&self, cq_handle: u64, cqn: u32, counter: Arc<AtomicU32>) {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&cq_handle.to_ne_bytes());
        self.push(Event {
            bytes,
            counter: Some(counter),
            cqn: Some(cqn),
        });
    }

    /// Queues an async event (`element`, `event_type`).
    pub fn push_async(&self, element: u64, event_type: u32, counter: Option<Arc<AtomicU32>>) {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&element.to_ne_bytes());
        bytes[8..12].copy_from_slice(&event_type.to_ne_bytes());
        self.push(Event {
            bytes,
            counter,
            cqn: None,
        });
    }

    /// Drops the queued completion events of CQ `cqn` (Linux
    /// `ib_uverbs_release_ucq`: unread events of a destroyed CQ are discarded).
    pub fn discard_cq(&self, cqn: u32) {
        let mut g = self.lock();
        g.queue.retain(|e| e.cqn != Some(cqn));
        Self::settle(&mut g);
    }

    /// Clears the eventfd when the queue is empty.
    fn settle(g: &mut Inner) {
        if g.queue.is_empty() && g.signalled {
            let mut v = 0u64;
            // SAFETY: an 8-byte read of our own eventfd, whose counter is nonzero
            // (`signalled`), so it does not block.
            unsafe { real::read(g.fd, (&mut v as *mut u64).cast(), 8) };
            g.signalled = false;
        }
    }

    /// `read(2)` of `len` bytes into the application's `buf`.
    pub fn read(&self, buf: u64, len: usize) -> Result<usize, Errno> {
        if len < self.rec {
            return Err(Errno::EINVAL);
        }
        // A program about to wait for a completion event may have rung its
        // doorbells (and armed its CQ) in a hot UAR page: forward them first.
        if crate::doorbell::hot() {
            crate::doorbell::flush_hot();
        }
        loop {
            let fd = {
                let mut g = self.lock();
                if g.fd < 0 {
                    return Err(Errno::EBADF);
                }
                if let Some(e) = g.queue.front() {
                    crate::user::copy_out(buf, &e.bytes[..self.rec])?;
                    let e = g.queue.pop_front().expect("front exists");
                    if let Some(c) = e.counter {
                        c.fetch_add(1, Ordering::AcqRel);
                    }
                    Self::settle(&mut g);
                    return Ok(self.rec);
                }
                g.fd
            };
            // SAFETY: F_GETFL on our own descriptor.
            let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            if fl >= 0 && fl & libc::O_NONBLOCK != 0 {
                return Err(Errno::EAGAIN);
            }
            // The program stops polling to wait: the device thread, napping while
            // the program's empty polls did its work, carries the traffic again now.
            crate::nic::end_assist();
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd. A signal ends the wait with EINTR, as the kernel's
            // read ends with ERESTARTSYS.
            let r = unsafe { libc::poll(&mut p, 1, -1) };
            if r < 0 {
                let e = Errno::last();
                if e == Errno::EINTR {
                    return Err(e);
                }
            }
        }
    }

    /// `close(2)`: the descriptor is closed; later events are dropped.
    pub fn close(&self) -> i32 {
        let mut g = self.lock();
        let fd = std::mem::replace(&mut g.fd, -1);
        g.queue.clear();
        // SAFETY: our own descriptor, closed once (the field is now -1).
        unsafe { real::close(fd) }
    }
}

/// Event files by descriptor (completion channels and async files).
static FILES: Mutex<Option<HashMap<i32, Arc<EventFile>>>> = Mutex::new(None);

/// Registers `f` under its descriptor.
pub fn register(f: &Arc<EventFile>) {
    let mut g = FILES.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashMap::new)
        .insert(f.fd(), Arc::clone(f));
}

/// The event file of descriptor `fd`.
pub fn file(fd: i32) -> Option<Arc<EventFile>> {
    let g = FILES.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()?.get(&fd).cloned()
}

/// Forgets descriptor `fd` (closing it).
pub fn unregister(fd: i32) -> Option<Arc<EventFile>> {
    let mut g = FILES.lock().unwrap_or_else(|e| e.into_inner());
    g.as_mut()?.remove(&fd)
}

/// Where a CQ's completion events go.
#[derive(Clone)]
pub struct Route {
    /// The CQ's `user_handle`.
    pub user_handle: u64,
    /// Its channel.
    pub channel: Arc<EventFile>,
    /// Its `comp_events_reported`.
    pub reported: Arc<AtomicU32>,
}

static ROUTES: Mutex<Option<HashMap<u32, Route>>> = Mutex::new(None);

/// Routes CQ `cqn`'s completion events.
pub fn route(cqn: u32, r: Route) {
    let mut g = ROUTES.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashMap::new).insert(cqn, r);
}

/// Stops routing CQ `cqn`'s events and drops those queued.
pub fn unroute(cqn: u32) {
    let r = {
        let mut g = ROUTES.lock().unwrap_or_else(|e| e.into_inner());
        g.as_mut().and_then(|m| m.remove(&cqn))
    };
    if let Some(r) = r {
        r.channel.discard_cq(cqn);
    }
}

fn deliver(cqn: u32) {
    if crate::trace() {
        eprintln!("uapi: completion event CQ {cqn:#x}");
    }
    let r = {
        let g = ROUTES.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().and_then(|m| m.get(&cqn)).cloned()
    };
    if let Some(r) = r {
        r.channel.push_comp(r.user_handle, cqn, r.reported);
    }
}

/// The kind of object an async event names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Object {
    /// A QP (by QPN).
    Qp,
    /// A CQ (by CQN).
    Cq,
    /// An SRQ (by SRQN).
    Srq,
}

/// Where an object's async events go: its context's async file, the object's
/// `user_handle` (the event's `element`), and its `events_reported`.
#[derive(Clone)]
pub struct AsyncRoute {
    /// The context's async file.
    pub file: Arc<EventFile>,
    /// The object's `user_handle`.
    pub user_handle: u64,
    /// Events read.
    pub reported: Arc<AtomicU32>,
}

type AsyncRoutes = HashMap<(Object, u32), AsyncRoute>;
static ASYNC: Mutex<Option<AsyncRoutes>> = Mutex::new(None);

/// Routes the async events of `obj` number `n`.
pub fn route_async(obj: Object, n: u32, r: AsyncRoute) {
    let mut g = ASYNC.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashMap::new).insert((obj, n), r);
}

/// Stops routing the async events of `obj` number `n`.
pub fn unroute_async(obj: Object, n: u32) {
    let mut g = ASYNC.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = g.as_mut() {
        m.remove(&(obj, n));
    }
}

/// `enum ib_event_type` of a device async event, and what it names (Linux
/// `mlx5_ib_qp_event`, `mlx5_ib_srq_event`, `mlx5_ib_cq_event`).
fn ib_event(ev: &ferroverbs::AsyncEvent) -> Option<(Object, u32, u32)> {
    use ferroverbs_hw::datapath::eqe::*;
    match *ev {
        ferroverbs::AsyncEvent::CqError { cqn, .. } => Some((Object::Cq, cqn, 0)),
        ferroverbs::AsyncEvent::Queue {
            event_type, number, ..
        } => {
            let (obj, ib) = match event_type {
                MLX5_EVENT_TYPE_WQ_CATAS_ERROR => (Object::Qp, 1),
                MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR => (Object::Qp, 2),
                MLX5_EVENT_TYPE_WQ_ACCESS_ERROR => (Object::Qp, 3),
                MLX5_EVENT_TYPE_COMM_EST => (Object::Qp, 4),
                MLX5_EVENT_TYPE_SQ_DRAINED => (Object::Qp, 5),
                MLX5_EVENT_TYPE_PATH_MIG => (Object::Qp, 6),
                MLX5_EVENT_TYPE_PATH_MIG_FAILED => (Object::Qp, 7),
                MLX5_EVENT_TYPE_SRQ_LAST_WQE => (Object::Qp, 16),
                MLX5_EVENT_TYPE_SRQ_CATAS_ERROR => (Object::Srq, 14),
                MLX5_EVENT_TYPE_SRQ_RQ_LIMIT => (Object::Srq, 15),
                _ => return None,
            };
            Some((obj, number & 0x00ff_ffff, ib))
        }
        _ => None,
    }
}

/// A port event's port and `enum ib_event_type` (`IBV_EVENT_PORT_ACTIVE` 9,
/// `IBV_EVENT_PORT_ERR` 10: Linux `mlx5_ib_handle_event` for the PORT_CHANGE
/// sub-types ACTIVE and DOWN).
fn port_event(ev: &ferroverbs::AsyncEvent) -> Option<(u8, u32)> {
    use ferroverbs_hw::datapath::eqe::{
        MLX5_PORT_CHANGE_SUBTYPE_ACTIVE as ACTIVE, MLX5_PORT_CHANGE_SUBTYPE_DOWN as DOWN,
    };
    match *ev {
        ferroverbs::AsyncEvent::PortChange { port, sub_type } if sub_type == ACTIVE => {
            Some((port, 9))
        }
        ferroverbs::AsyncEvent::PortChange { port, sub_type } if sub_type == DOWN => {
            Some((port, 10))
        }
        _ => None,
    }
}

/// The async files of the open contexts.
fn async_files() -> Vec<Arc<EventFile>> {
    let g = FILES.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref().map_or_else(Vec::new, |m| {
        m.values()
            .filter(|f| f.rec == ASYNC_RECORD)
            .cloned()
            .collect()
    })
}

/// The size of an async file's record (`struct ib_uverbs_async_event_desc`).
const ASYNC_RECORD: usize = crate::abi::async_event_desc::SIZE;

fn deliver_async(ev: ferroverbs::AsyncEvent) {
    // A device event goes to every context's async file, its `element` the port
    // number (Linux `ib_uverbs_event_handler`: `uverbs_async_handler(async_file,
    // event->element.port_num, ...)` for each registered ucontext).
    if let Some((port, ty)) = port_event(&ev) {
        let files = async_files();
        if crate::trace() {
            eprintln!("uapi: port event {ev:?} -> {ty} ({} files)", files.len());
        }
        for f in files {
            f.push_async(u64::from(port), ty, None);
        }
        return;
    }
    let Some((obj, n, ty)) = ib_event(&ev) else {
        return;
    };
    let r = {
        let g = ASYNC.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().and_then(|m| m.get(&(obj, n))).cloned()
    };
    if crate::trace() {
        eprintln!("uapi: async event {ev:?} -> {ty} ({})", r.is_some());
    }
    if let Some(r) = r {
        r.file.push_async(r.user_handle, ty, Some(r.reported));
    }
}

/// How often the async thread looks at the device's async EQ.
pub const ASYNC_PERIOD: Duration = Duration::from_millis(20);

/// Starts the thread that routes the completion EQ's events. It sleeps in `poll` on
/// the EQ's interrupt eventfd: no CPU while nothing happens.
pub fn start(nic: &'static Nic) {
    let spawned = std::thread::Builder::new()
        .name("uapi-events".into())
        .spawn(move || loop {
            match nic.channel.get_cq_event_timeout(Duration::from_secs(1)) {
                Some(ev) => deliver(ev.cqn),
                None if crate::trace() => {
                    eprintln!(
                        "uapi: idle second; link {:?}; device {:?}",
                        nic.link.as_ref().map(|l| l.stats()),
                        nic.sim.as_ref().map(|s| s.stats().data_path)
                    );
                }
                None => {}
            }
        });
    if let Err(e) = spawned {
        eprintln!("ferroverbs-uapi: cannot start the event thread: {e}");
    }
    let spawned = std::thread::Builder::new()
        .name("uapi-async".into())
        .spawn(move || loop {
            std::thread::sleep(ASYNC_PERIOD);
            let _ = nic.ctx.process_events();
            while let Some(ev) = nic.ctx.next_async_event() {
                deliver_async(ev);
            }
        });
    if let Err(e) = spawned {
        eprintln!("ferroverbs-uapi: cannot start the async event thread: {e}");
    }
}
