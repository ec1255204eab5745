"""The snapshot codec: msgpack with named ext types, the value checks, and the one cattrs converter."""
