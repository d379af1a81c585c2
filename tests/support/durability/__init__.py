"""The durability tests' machinery: the worker process that opens a session from a durable
store and can kill itself at an exact point (``worker``), the driver that runs workers as
separate processes and reads what they left (``driver``), and the checks a finished
conversation must pass however often its workers were killed (``checks``)."""
