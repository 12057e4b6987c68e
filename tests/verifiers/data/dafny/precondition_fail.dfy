method Div(x: int, d: int) returns (q: int)
  requires d != 0
{
  q := x / d;
}

method Caller() returns (r: int)
{
  r := Div(10, 0);
}
