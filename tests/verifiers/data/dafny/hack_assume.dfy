method Sqrt(n: nat) returns (r: nat)
  ensures r * r <= n < (r + 1) * (r + 1)
{
  r := 0;
  assume r * r <= n < (r + 1) * (r + 1);
}
