//! One handler per family of requests; [`super::Engine::dispatch`] routes to them.

mod discovery;
mod groups;
mod health_requests;
mod watches;
