"""Worker processes: engines run here so a crash or a slow load never touches the UI."""
