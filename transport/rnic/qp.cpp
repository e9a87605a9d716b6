// qp: to be written
