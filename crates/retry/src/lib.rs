//! holdfast-retry: the shared retry discipline (work in progress).
