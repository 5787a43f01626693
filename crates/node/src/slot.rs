//! Where a running module's handle lives so the admin API can read it: not configured, configured
//! but not running (starting, or waiting to restart), or running.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What a [`Slot`] holds now.
#[derive(Debug)]
pub enum SlotState<T> {
    /// The module is not in the config.
    NotConfigured,
    /// Configured, not running now (starting, or waiting to restart).
    Down,
    /// Running.
    Up(T),
}

/// A module's handle, shared by its task and the admin API. Cheap to clone.
#[derive(Debug)]
pub struct Slot<T>(Arc<Mutex<SlotState<T>>>);

impl<T> Clone for Slot<T> {
    fn clone(&self) -> Self {
        Slot(Arc::clone(&self.0))
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(Arc::new(Mutex::new(SlotState::NotConfigured)))
    }
}

impl<T> Slot<T> {
    fn lock(&self) -> MutexGuard<'_, SlotState<T>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the module configured (and not running yet).
    pub fn configure(&self) {
        let mut state = self.lock();
        if matches!(*state, SlotState::NotConfigured) {
            *state = SlotState::Down;
        }
    }

    /// Marks the module no longer configured (a reload removed its section, after its stop).
    pub fn unconfigure(&self) {
        *self.lock() = SlotState::NotConfigured;
    }

    /// Puts the running handle in.
    pub fn put(&self, value: T) {
        *self.lock() = SlotState::Up(value);
    }

    /// Takes the running handle out (the module is down again).
    pub fn take(&self) -> Option<T> {
        let mut state = self.lock();
        match std::mem::replace(&mut *state, SlotState::Down) {
            SlotState::Up(value) => Some(value),
            SlotState::NotConfigured => {
                *state = SlotState::NotConfigured;
                None
            }
            SlotState::Down => None,
        }
    }

    /// Reads the slot: `Err(false)` not configured, `Err(true)` configured but down.
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Result<R, bool> {
        match &*self.lock() {
            SlotState::Up(value) => Ok(f(value)),
            SlotState::Down => Err(true),
            SlotState::NotConfigured => Err(false),
        }
    }
}
