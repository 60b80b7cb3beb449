"""The source side: connections, the server's dialect, the catalog of captured tables, chunk reads
and binlog reads."""
