//! Linux sandbox adapter: Landlock + seccomp (not yet built: see issue 5).
