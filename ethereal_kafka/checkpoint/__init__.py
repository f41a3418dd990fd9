"""The checkpoint coordinator: epochs, transactional id pool, fencing, epoch markers, recovery, history."""
