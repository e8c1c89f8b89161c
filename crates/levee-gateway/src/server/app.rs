//! The gateway as a service value: a request in, a response out, with no
//! listener in between. The in-process tests call it, with in-memory bodies
//! and in-process providers, under tokio's paused time. It runs the same
//! `handler::handle` the public listener calls from each connection's task
//! (`server`, `front`), which does not go through this value.

use crate::error::BoxError;
use crate::http::respond::Body;
use crate::request::handler::handle;
use crate::runtime::shared::{SetupError, Shared};
use crate::upstream::transport::Dial;
use bytes::Bytes;
use http::{Request, Response};
use levee_config::Config;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The gateway over one shared state.
#[derive(Clone)]
pub struct App {
    shared: Arc<Shared>,
}

impl App {
    /// A gateway for `config`; `seed` seeds the per-request RNGs.
    pub fn new(config: Config, seed: u64) -> Result<App, SetupError> {
        Ok(App::from(Arc::new(Shared::new(config, seed)?)))
    }

    /// A gateway whose providers are reached through `dial`: in-memory
    /// pipes to providers in this process.
    pub fn in_process(config: Config, seed: u64, dial: Dial) -> Result<App, SetupError> {
        let shared = Shared::with_dial(config, seed, Some(dial))?;
        Ok(App::from(Arc::new(shared)))
    }

    /// The state every request shares (metrics, providers, config).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The status page as the admin listener serves it (`GET /`).
    pub fn status_page(&self) -> String {
        crate::server::status::render(&self.shared)
    }

    /// Answers one request, Levee's own fields in the answer's header map
    /// (the HTTP/1 front writes them from the body's stamp).
    pub async fn call<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let resp = handle(Arc::clone(&self.shared), req).await;
        let (mut parts, mut body) = resp.into_parts();
        body.unstamp(&mut parts.headers);
        Response::from_parts(parts, body)
    }
}

impl From<Arc<Shared>> for App {
    fn from(shared: Arc<Shared>) -> Self {
        App { shared }
    }
}

impl<B> hyper::service::Service<Request<B>> for App
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, req: Request<B>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move { Ok(handle(shared, req).await) })
    }
}
