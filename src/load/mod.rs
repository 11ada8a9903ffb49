//! `netrig load`: latency under working conditions. The run's phases, probe
//! statistics and responsiveness (`protocol::load::model`, pure) and the run that makes
//! the load and sends the probes ([`run`]).
mod probes;
pub mod run;
