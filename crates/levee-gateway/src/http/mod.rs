//! The caller-facing HTTP: HTTP/1.1 served in each connection's task
//! (`front`), the framing both directions share (`h1wire`, `fieldname`), a
//! request body read whole (`collect`) and inspected for its model
//! (`inspect`, `quickjson`), the answer fields relayed as bytes
//! (`rawfields`), Levee's own answers and the headers every
//! answer carries (`respond`), SSE framing for relayed streams (`sse`), and
//! the short field list an attempt's request is built as (`outbound`).

pub(crate) mod callerfields;
pub(crate) mod collect;
pub(crate) mod fieldname;
pub(crate) mod front;
pub(crate) mod h1wire;
pub(crate) mod inspect;
pub(crate) mod outbound;
pub(crate) mod quickjson;
pub(crate) mod rawfields;
pub(crate) mod respond;
pub(crate) mod sse;
pub(crate) mod unread;
