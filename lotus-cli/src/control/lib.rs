//! The lotus control library: the C ABI a profiled process calls to open
//! and close measurement windows. (Being built; see include/lotus.h.)
