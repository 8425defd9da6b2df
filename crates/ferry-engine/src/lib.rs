//! ferry-engine
