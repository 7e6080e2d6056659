//! macOS sandbox adapter: Seatbelt profiles generated from the policy (not yet built: see issue 6).
