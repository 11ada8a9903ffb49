//! `netrig load`: latency under working conditions. The run's phases, probe
//! statistics and responsiveness ([`model`], pure) and the run that makes
//! the load and sends the probes ([`run`]).

pub mod model;
mod probes;
pub mod run;
