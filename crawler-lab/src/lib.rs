//! crawler-lab
