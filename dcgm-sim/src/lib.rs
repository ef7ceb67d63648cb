//! A simulated `libdcgm.so.4`: the DCGM 4.6 C API over a simulated node, for testing DCGM
//! clients without a GPU. See README.md and etc/sim/README.md.
//!
//! * [`abi`]: the C exports (the cdylib is a drop-in `libdcgm.so.4`),
//! * [`engine`]: the simulated host engine behind them,
//! * [`proto`]: the request/reply contract between the two,
//! * [`transport`]: that contract over TCP or a unix socket, for `dcgm-sim-hostengine`.

pub mod abi;
pub mod engine;
pub mod proto;
pub mod transport;
