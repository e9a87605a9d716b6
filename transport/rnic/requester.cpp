// requester: to be written
