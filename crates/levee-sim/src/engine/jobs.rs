//! Provider jobs: the last hop of every stack, admitted (or refused) by the
//! simulated provider, answered when its service time is over.

use super::{Call, Engine, Ev, Kind, Parent};
use crate::layers::Reply;
use crate::provider::{serve, Admission};
use crate::slab::Ref;
use crate::virtual_time::ns;

impl Engine<'_> {
    /// A job arrives at provider `provider` for `model`: admitted, queued,
    /// or refused, and its answer scheduled.
    pub(super) fn job_begin(&mut self, r: Ref, provider: u16, model: &str) {
        let Some(c) = self.calls.get(r) else { return };
        let req = c.req;
        self.reqs[req as usize].attempts += 1;
        let stream = self.reqs[req as usize].stream;
        let tokens = self.sc.streams[stream as usize].tokens;
        let p = provider as usize;
        let adm = self.providers[p].arrive(
            &self.sc.providers[p],
            self.now,
            model,
            tokens,
            r,
            &mut self.rng,
        );
        self.m.upstream(stream, self.now, &adm);
        let reserved = !matches!(adm, Admission::Limited { .. });
        let (reply, holds, after) = match adm {
            Admission::Limited { retry_after, after } => (
                Reply::Status {
                    status: 429,
                    retry_after: Some(retry_after),
                    no_retry: false,
                },
                false,
                Some(after),
            ),
            Admission::Answer {
                status,
                retry_after,
                after,
            } => (
                Reply::Status {
                    status,
                    retry_after,
                    no_retry: false,
                },
                false,
                Some(after),
            ),
            Admission::Serve(s) => (
                Reply::Status {
                    status: s.status,
                    retry_after: s.retry_after,
                    no_retry: false,
                },
                true,
                Some(s.after),
            ),
            Admission::Queued => (Reply::status(200), true, None),
        };
        if let Some(Call {
            kind:
                Kind::Job {
                    reply: rp,
                    holds_worker,
                    reserved: rs,
                    ..
                },
            ..
        }) = self.calls.get_mut(r)
        {
            *rp = reply;
            *holds_worker = holds;
            *rs = reserved;
        }
        match after {
            Some(after) if after == self.sc.providers[p].reject_latency => {
                let lane = self.v.layers.len() + p;
                self.schedule_lane(lane, self.now + ns(after), Ev::Done(r));
            }
            Some(after) => self.schedule(self.now + ns(after), Ev::Done(r)),
            None => {}
        }
    }

    /// A job's answer is due: settle its tokens, report to Levee, free its
    /// worker for the next in line, and answer the caller.
    pub(super) fn done(&mut self, r: Ref) {
        let Some(Call {
            req,
            parent,
            kind:
                Kind::Job {
                    provider,
                    reply,
                    holds_worker,
                    reserved,
                },
            ..
        }) = self.calls.get(r)
        else {
            return;
        };
        let (p, reply, holds, reserved) = (*provider as usize, *reply, *holds_worker, *reserved);
        let (req, parent) = (*req, *parent);
        // The answer settles the tokens its request reserved, and its head
        // reports what is left of each meter to whoever still reads it.
        let tokens = self.sc.streams[self.stream_of(req) as usize].tokens;
        let m = &self.sc.providers[p];
        if reserved {
            self.providers[p].settle(m, self.now, tokens, reply.is_success());
        }
        if let (Parent::Call(caller), true) = (parent, self.levee.is_some()) {
            let reported = self.providers[p].remaining(m, self.now);
            self.levee_answered(caller, r, &reported, tokens, reply.is_success());
        }
        // A generated answer is billed, read or orphaned.
        if reply.is_success() {
            self.m.billed(self.stream_of(req));
        }
        if holds {
            if let Some(next) = self.providers[p].finish() {
                self.serve_queued(next, p);
            }
        }
        self.finish(r, reply);
    }

    /// A queued job gets the worker that just came free.
    fn serve_queued(&mut self, r: Ref, p: usize) {
        let Some(c) = self.calls.get_mut(r) else {
            return;
        };
        let model = &self.sc.streams[self.reqs[c.req as usize].stream as usize].model;
        let s = serve(&self.sc.providers[p], self.now, model, &mut self.rng);
        if let Kind::Job { reply, .. } = &mut c.kind {
            *reply = Reply::Status {
                status: s.status,
                retry_after: s.retry_after,
                no_retry: false,
            };
        }
        self.schedule(self.now + ns(s.after), Ev::Done(r));
    }
}
