function Up(n: nat): nat
  decreases n
{
  if n == 0 then 0 else Up(n + 1)
}
