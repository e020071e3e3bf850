// polyloop run viewer: sub-agent runs (design 0412). Filled in by the next commit.
