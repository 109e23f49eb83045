package bundle

// SimSpec is the bundled simulator's credential layout, for the external
// tests.
var SimSpec = simSpec
