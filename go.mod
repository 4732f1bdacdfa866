module kimimoe

go 1.26
