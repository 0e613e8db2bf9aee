"""Data by content id (issue 26): UnixFS files and folders, their blocks on disk, and the
roots this node keeps."""
