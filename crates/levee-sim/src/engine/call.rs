//! What travels down a variant's stack: a logical request, and the calls
//! made for it, one per hop — a caller layer's, Levee's, or a job at a
//! provider.

use crate::layers::Reply;
use crate::slab::Ref;
use levee_policy::RequestState;

/// Who waits for a call's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Parent {
    /// The end user: the call is the logical request's outermost one.
    User,
    Call(Ref),
    /// Nobody any more: the caller gave up.
    Orphan,
}

/// A hop of the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hop {
    Caller(u8),
    Levee,
    Provider(u16),
}

#[derive(Debug)]
pub(super) enum Kind {
    Caller {
        layer: u8,
        has_worker: bool,
        since: u64,
    },
    Levee {
        route: u16,
        st: Box<RequestState>,
        guard: Option<levee_policy::ConcurrencyGuard>,
    },
    Job {
        provider: u16,
        reply: Reply,
        holds_worker: bool,
        /// Its tokens are reserved at the provider until it answers.
        reserved: bool,
    },
}

#[derive(Debug)]
pub(super) struct Call {
    pub(super) req: u32,
    pub(super) parent: Parent,
    /// When the caller of this call stops waiting, if it said.
    pub(super) deadline: Option<u64>,
    pub(super) child: Option<Ref>,
    pub(super) attempt: u32,
    pub(super) kind: Kind,
}

impl Call {
    /// A call on `hop` for request `req`, not yet begun.
    pub(super) fn new(hop: Hop, parent: Parent, req: u32, deadline: Option<u64>) -> Self {
        let kind = match hop {
            Hop::Caller(layer) => Kind::Caller {
                layer,
                has_worker: false,
                since: 0,
            },
            Hop::Levee => Kind::Levee {
                route: 0,
                st: Box::new(RequestState::new(levee_policy::Instant::ZERO)),
                guard: None,
            },
            Hop::Provider(p) => Kind::Job {
                provider: p,
                reply: Reply::status(200),
                holds_worker: false,
                reserved: false,
            },
        };
        Call {
            req,
            parent,
            deadline,
            child: None,
            attempt: 0,
            kind,
        }
    }
}

#[derive(Debug)]
pub(super) struct Logical {
    pub(super) stream: u16,
    pub(super) attempts: u32,
    pub(super) live: u32,
    pub(super) done: bool,
    /// When the user sent it (virtual nanoseconds).
    pub(super) arrived: u64,
}
