//! crawler-store
