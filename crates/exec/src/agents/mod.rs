//! The built-in agents (`mantle run --trace/--count/--deny/--redirect/
//! --delay/--perform`): pure, unit-tested against a fake guest.
