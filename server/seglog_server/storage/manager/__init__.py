"""The log manager: start-up over every directory, topics, maintenance jobs, statistics and
shutdown. The top of the storage; imports everything below it."""
