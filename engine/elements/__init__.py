"""Elements: the base and the body runner, steps, Wait/Gate/Sleep, and the Flow at the root (containers are in containers/)."""
