package safewrite

// Version is this client's version, the product's (VERSION at the repository's root;
// the module's tag is clients/go/vVersion). The skew policy in docs/compatibility.md
// says which sidecars it works with.
const Version = "0.2.0"
