"""Migration scripts; a package so that a built wheel ships them."""
