"""Shape records (one versioned schema for every node, the report and the web extension)."""
