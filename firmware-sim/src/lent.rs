//! Storage a device or its server is given: lent by the caller, or, on a host, owned.
//!
//! Bare metal lends everything (statics, a `StaticCell`): a device borrows its memory, its
//! cycle counter and its server's reply storage for as long as it lives. A host that keeps
//! devices in a struct of its own — the share of a thread placement's devices its own
//! thread serves while it waits — cannot lend from that struct to itself, so with `std`
//! each part may be owned instead (`Device::owning`, `Server::owning`). Without `std`
//! there is one variant, and every access compiles to the plain reference it was before.

use core::ops::{Deref, DerefMut};

/// A part given to write to: `&mut T`, or (`std`) a box of it.
pub enum Lent<'a, T: ?Sized> {
    /// Lent by the caller for the holder's lifetime.
    Borrowed(&'a mut T),
    /// Owned by the holder.
    #[cfg(feature = "std")]
    Owned(std::boxed::Box<T>),
}

impl<T: ?Sized> Deref for Lent<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Self::Borrowed(t) => t,
            #[cfg(feature = "std")]
            Self::Owned(t) => t,
        }
    }
}

impl<T: ?Sized> DerefMut for Lent<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        match self {
            Self::Borrowed(t) => t,
            #[cfg(feature = "std")]
            Self::Owned(t) => t,
        }
    }
}

/// A part given to read (and to update through its own interior mutability): `&T`, or
/// (`std`) the value itself.
pub enum Shared<'a, T> {
    /// Lent by the caller (a `static` on bare metal).
    Borrowed(&'a T),
    /// Owned by the holder.
    #[cfg(feature = "std")]
    Owned(T),
}

impl<T> Deref for Shared<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Self::Borrowed(t) => t,
            #[cfg(feature = "std")]
            Self::Owned(t) => t,
        }
    }
}

impl<T: ?Sized> core::fmt::Debug for Lent<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Borrowed(_) => "Lent::Borrowed",
            #[cfg(feature = "std")]
            Self::Owned(_) => "Lent::Owned",
        })
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for Shared<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}
