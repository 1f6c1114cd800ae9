"""What a model costs on a device: op bundles, device tables and their validation.
Empty until the latency-table issue lands; nothing here is public yet."""

__all__: list[str] = []
