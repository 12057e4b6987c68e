method First(a: array<int>) returns (v: int)
{
  v := a[0];
}
