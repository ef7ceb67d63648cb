//! Configuration: command-line flags and environment (`cli`), the counters CSV
//! (`counters`) and the `-d`/`-s`/`-p` device selectors (`selector`).

pub mod cli;
pub mod configmap;
pub mod counters;
pub mod selector;
