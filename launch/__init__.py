"""launch: expand a study (sizes x mixture weights x seeds) into runs and execute them."""
