//! ferry's scorecard: standard data sets over every protocol, ferry
//! against the peers that are installed. (Being written.)
