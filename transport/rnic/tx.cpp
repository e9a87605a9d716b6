// tx: to be written
