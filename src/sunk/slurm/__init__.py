"""slurmrestd access: async client, error types, version-specific request/response shapes."""
